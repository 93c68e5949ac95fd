import Testing

@Test func placeholder_BLETransportTests() {}
