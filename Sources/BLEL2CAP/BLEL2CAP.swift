// BLEL2CAP — placeholder until the layer lands.
