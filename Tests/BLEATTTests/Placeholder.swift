import Testing

@Test func placeholder_BLEATTTests() {}
