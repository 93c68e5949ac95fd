import Testing

@Test func placeholder_BLEHCITests() {}
