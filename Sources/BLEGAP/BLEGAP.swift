// BLEGAP — placeholder until the layer lands.
