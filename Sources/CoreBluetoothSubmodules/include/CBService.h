// CoreBluetooth.CBService: the declarations are Swift (Sources/CoreBluetooth); see module.modulemap.
