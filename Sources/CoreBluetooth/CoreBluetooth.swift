// CoreBluetooth — placeholder until the layer lands.
