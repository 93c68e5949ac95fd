// BLEVirtualRadio — placeholder until the layer lands.
