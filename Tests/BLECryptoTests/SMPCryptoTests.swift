// The SMP toolbox on the Core Specification's sample data (Vol 3 Part H Appendix D) and RFC 4493.
import Testing
@testable import BLECrypto

/// Spec notation: hex, most significant octet first, spaces ignored.
func h(_ s: String) -> [UInt8] {
    let hex = s.filter { !$0.isWhitespace }
    return stride(from: 0, to: hex.count, by: 2).map { i in
        UInt8(hex[hex.index(hex.startIndex, offsetBy: i)..<hex.index(hex.startIndex, offsetBy: i + 2)], radix: 16)!
    }
}

let u = h("20b003d2 f297be2c 5e2c83a7 e9f9a5b9 eff49111 acf4fddb cc030148 0e359de6")
let v = h("55188b3d 32f6bb9a 900afcfb eed4e72a 59cb9ac2 f19d7cfb 6b4fdd49 f47fc5fd")
let n1 = h("d5cb8454 d177733e ffffb2ec 712baeab")
let n2 = h("a6e8e7cc 25a75f6e 216583f7 ff3dc4cf")
let a1 = h("00561237 37bfce"), a2 = h("00a71370 2dcfc1")
let dhkey = h("ec0234a3 57c8ad05 341010a6 0a397d9b 99796b13 b4f866f1 868d34f3 73bfa698")

@Suite struct SMPCryptoTests {
    @Test func aesCMACOnRFC4493() throws {
        let k = h("2b7e1516 28aed2a6 abf71588 09cf4f3c")
        #expect(try SMPCrypto.cmac(k, []) == h("bb1d6929 e9593728 7fa37d12 9b756746"))
        #expect(try SMPCrypto.cmac(k, h("6bc1bee2 2e409f96 e93d7e11 7393172a")) == h("070a16b4 6b4d4144 f79bdd9d d04a287c"))
        #expect(
            try SMPCrypto.cmac(k, h("6bc1bee2 2e409f96 e93d7e11 7393172a ae2d8a57 1e03ac9c 9eb76fac 45af8e51 30c81c46 a35ce411"))
                == h("dfa66747 de9ae630 30ca3261 1497c827"))
        #expect(
            try SMPCrypto.cmac(
                k, h("6bc1bee2 2e409f96 e93d7e11 7393172a ae2d8a57 1e03ac9c 9eb76fac 45af8e51 30c81c46 a35ce411 e5fbc119 1a0a52ef f69f2445 df4f9b17 ad2b417b e66c3710"))
                == h("51f0bebf 7e3b9d92 fc497417 79363cfe"))
    }

    @Test func legacyC1AndS1() throws {
        #expect(
            try SMPCrypto.c1(
                k: [UInt8](repeating: 0, count: 16), r: h("5783D52156AD6F0E6388274EC6702EE0"), preq: h("07071000000101"),
                pres: h("05000800000302"), iat: 1, rat: 0, ia: h("A1A2A3A4A5A6"), ra: h("B1B2B3B4B5B6"))
                == h("1e1e3fef878988ead2a74dc5bef13b86"))
        #expect(
            try SMPCrypto.s1(k: [UInt8](repeating: 0, count: 16), r1: h("000F0E0D0C0B0A091122334455667788"), r2: h("010203040506070899AABBCCDDEEFF00"))
                == h("9a1fe1f0e8b0f49b5b4216ae796da062"))
    }

    @Test func secureConnectionsFunctions() throws {
        #expect(try SMPCrypto.f4(u: u, v: v, x: n1, z: 0) == h("f2c916f1 07a9bd1c f1eda1be a974872d"))
        let (macKey, ltk) = try SMPCrypto.f5(w: dhkey, n1: n1, n2: n2, a1: a1, a2: a2)
        #expect(macKey == h("2965f176 a1084a02 fd3f6a20 ce636e20"))
        #expect(ltk == h("69867911 69d7cd23 980522b5 94750a38"))
        #expect(
            try SMPCrypto.f6(w: macKey, n1: n1, n2: n2, r: h("12a3343b b453bb54 08da42d2 0c2d0fc8"), ioCap: h("010102"), a1: a1, a2: a2)
                == h("e3c47398 9cd0e8c5 d26c0b09 da958f61"))
        #expect(try SMPCrypto.g2(u: u, v: v, x: n1, y: n2) == 0x2F9E_D5BA)
        #expect(try SMPCrypto.g2(u: u, v: v, x: n1, y: n2) % 1_000_000 == 0x2F9E_D5BA % 1_000_000)
        #expect(try SMPCrypto.h6(w: h("ec0234a3 57c8ad05 341010a6 0a397d9b"), keyID: h("6c656272")) == h("2d9ae102 e76dc91c e8d3a9e2 80b16399"))
        #expect(
            try SMPCrypto.h7(salt: h("00000000 00000000 00000000 746D7031"), w: h("ec0234a3 57c8ad05 341010a6 0a397d9b"))
                == h("fb173597 c6a3c0ec d2998c2a 75a57011"))
        #expect(try SMPCrypto.ah(k: h("ec0234a3 57c8ad05 341010a6 0a397d9b"), r: h("708194")) == h("0dfbaa"))
    }

    @Test func p256DiffieHellmanOnTheSampleKeys() throws {
        let privA = h("3f49f6d4 a3c55f38 74c9b3e3 d2103f50 4aff607b eb40b799 5899b8a6 cd3c1abd")
        let privB = h("55188b3d 32f6bb9a 900afcfb eed4e72a 59cb9ac2 f19d7cfb 6b4fdd49 f47fc5fd")
        let pubA = (
            h("20b003d2 f297be2c 5e2c83a7 e9f9a5b9 eff49111 acf4fddb cc030148 0e359de6"),
            h("dc809c49 652aeb6d 63329abf 5a52155c 766345c2 8fed3024 741c8ed0 1589d28b")
        )
        let pubB = (
            h("1ea1f0f0 1faf1d96 09592284 f19e4c00 47b58afd 8615a69f 559077b2 2faaa190"),
            h("4c55f33e 429dad37 7356703a 9ab85160 472d1130 e28e3676 5f89aff9 15b1214a")
        )
        #expect(try SMPCrypto.publicKey(privateKey: privA) == pubA)
        #expect(try SMPCrypto.dhKey(privateKey: privA, peerX: pubB.0, peerY: pubB.1) == dhkey)
        #expect(try SMPCrypto.dhKey(privateKey: privB, peerX: pubA.0, peerY: pubA.1) == dhkey)
        // A point off the curve is refused, never used.
        #expect(throws: SMPCrypto.Failure.self) { try SMPCrypto.dhKey(privateKey: privA, peerX: pubB.0, peerY: pubA.1) }
        #expect(throws: SMPCrypto.Failure.self) { try SMPCrypto.e([1, 2], [3]) }
    }
}
