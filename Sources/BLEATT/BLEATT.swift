// BLEATT — placeholder until the layer lands.
