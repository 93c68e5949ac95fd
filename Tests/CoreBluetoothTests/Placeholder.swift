import Testing

@Test func placeholder_CoreBluetoothTests() {}
