// BLEHCI — placeholder until the layer lands.
