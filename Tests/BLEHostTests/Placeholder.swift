import Testing

@Test func placeholder_BLEHostTests() {}
