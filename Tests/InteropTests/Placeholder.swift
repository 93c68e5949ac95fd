import Testing

@Test func placeholder_InteropTests() {}
