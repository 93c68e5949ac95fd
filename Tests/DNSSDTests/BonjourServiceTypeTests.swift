import Testing
@testable import DNSSD

@Suite struct BonjourServiceTypeTests {
    @Test func acceptsDocumentedExamples() {
        for ok in ["chat", "a", "chat-1", "x1-2-3", "abcdefghijklmno", "MKSVC"] {
            #expect(BonjourServiceType.isValid(ok), "\(ok)")
        }
    }
    @Test func refusesEachRule() {
        #expect(throws: BonjourServiceType.ValidationError.empty) { try BonjourServiceType.validate("") }
        #expect(throws: BonjourServiceType.ValidationError.tooLong(length: 16)) { try BonjourServiceType.validate("abcdefghijklmnop") }
        #expect(throws: BonjourServiceType.ValidationError.invalidCharacter("_")) { try BonjourServiceType.validate("a_b") }
        #expect(throws: BonjourServiceType.ValidationError.noLetter) { try BonjourServiceType.validate("123") }
        #expect(throws: BonjourServiceType.ValidationError.leadingHyphen) { try BonjourServiceType.validate("-ab") }
        #expect(throws: BonjourServiceType.ValidationError.trailingHyphen) { try BonjourServiceType.validate("ab-") }
        #expect(throws: BonjourServiceType.ValidationError.doubleHyphen) { try BonjourServiceType.validate("a--b") }
        #expect(throws: BonjourServiceType.ValidationError.invalidCharacter("C")) { try BonjourServiceType.validate("aC", allowUppercase: false) }
        #expect(throws: BonjourServiceType.ValidationError.invalidCharacter("é")) { try BonjourServiceType.validate("café") }
    }
}
