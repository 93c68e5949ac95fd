// CoreBluetooth.CoreBluetoothDefines: the declarations are Swift (Sources/CoreBluetooth); see module.modulemap.
