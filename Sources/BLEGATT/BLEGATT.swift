// BLEGATT — placeholder until the layer lands.
