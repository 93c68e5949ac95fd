// The CoreBluetoothSubmodules target exists for its module map (include/module.modulemap); this file gives the
// C target the one source file SwiftPM requires.
