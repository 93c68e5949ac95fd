import Testing

@Test func placeholder_BLEGAPTests() {}
