// BLEHost — placeholder until the layer lands.
