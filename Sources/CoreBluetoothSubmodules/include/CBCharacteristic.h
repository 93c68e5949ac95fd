// CoreBluetooth.CBCharacteristic: the declarations are Swift (Sources/CoreBluetooth); see module.modulemap.
