import Testing

@Test func placeholder_BLEVirtualRadioTests() {}
