import Testing

@Test func placeholder_BLEGATTTests() {}
