// BLETransport — placeholder until the layer lands.
