import Testing

@Test func placeholder_BLEL2CAPTests() {}
