// CoreBluetooth.CBPeripheralManager: the declarations are Swift (Sources/CoreBluetooth); see module.modulemap.
