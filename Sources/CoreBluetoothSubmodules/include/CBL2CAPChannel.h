// CoreBluetooth.CBL2CAPChannel: the declarations are Swift (Sources/CoreBluetooth); see module.modulemap.
