// The Security Manager's cryptographic toolbox (Core Spec Vol 3 Part H §2.2), on swift-crypto's AES,
// AES-CMAC (RFC 4493) and P-256. Every value here is most significant octet first, as the specification
// writes its functions and sample data (Vol 3 Part H Appendix D); the SMP layer reverses what travels
// little-endian on the wire.
import Crypto
import CryptoExtras

public enum SMPCrypto {
    public enum Failure: Error, Equatable { case badLength(String), crypto(String) }

    /// e(k, p): AES-128 of one block (§2.2.1).
    public static func e(_ key: [UInt8], _ plaintext: [UInt8]) throws -> [UInt8] {
        guard key.count == 16, plaintext.count == 16 else { throw Failure.badLength("e needs 16-octet key and block") }
        var block = plaintext
        do { try AES.permute(&block, key: SymmetricKey(data: key)) } catch { throw Failure.crypto("\(error)") }
        return block
    }

    /// AES-CMAC (RFC 4493) with a 128-bit key.
    public static func cmac(_ key: [UInt8], _ message: [UInt8]) throws -> [UInt8] {
        guard key.count == 16 else { throw Failure.badLength("AES-CMAC needs a 16-octet key") }
        do {
            var mac = try AES.CMAC(key: SymmetricKey(data: key))
            mac.update(data: message)
            return Array(mac.finalize())
        } catch {
            throw Failure.crypto("\(error)")
        }
    }

    private static func xor(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] { zip(a, b).map { $0 ^ $1 } }

    /// c1: LE legacy pairing confirm value (§2.2.3). preq/pres 7 octets, iat/rat the address types, ia/ra 6 octets.
    public static func c1(k: [UInt8], r: [UInt8], preq: [UInt8], pres: [UInt8], iat: UInt8, rat: UInt8, ia: [UInt8], ra: [UInt8]) throws -> [UInt8] {
        guard preq.count == 7, pres.count == 7, ia.count == 6, ra.count == 6 else { throw Failure.badLength("c1") }
        let p1 = pres + preq + [rat & 1, iat & 1]
        let p2 = [0, 0, 0, 0] + ia + ra
        return try e(k, xor(try e(k, xor(r, p1)), p2))
    }

    /// s1: LE legacy pairing short-term key (§2.2.4): the low 64 bits of r1 and of r2.
    public static func s1(k: [UInt8], r1: [UInt8], r2: [UInt8]) throws -> [UInt8] {
        guard r1.count == 16, r2.count == 16 else { throw Failure.badLength("s1") }
        return try e(k, Array(r1[8...]) + Array(r2[8...]))
    }

    /// f4: LE Secure Connections confirm value (§2.2.6).
    public static func f4(u: [UInt8], v: [UInt8], x: [UInt8], z: UInt8) throws -> [UInt8] {
        guard u.count == 32, v.count == 32 else { throw Failure.badLength("f4") }
        return try cmac(x, u + v + [z])
    }

    /// f5: MacKey and LTK from the DHKey (§2.2.7). a1/a2 are the address type octet followed by the address.
    public static func f5(w: [UInt8], n1: [UInt8], n2: [UInt8], a1: [UInt8], a2: [UInt8]) throws -> (macKey: [UInt8], ltk: [UInt8]) {
        guard w.count == 32, n1.count == 16, n2.count == 16, a1.count == 7, a2.count == 7 else { throw Failure.badLength("f5") }
        let salt: [UInt8] = [0x6C, 0x88, 0x83, 0x91, 0xAA, 0xF5, 0xA5, 0x38, 0x60, 0x37, 0x0B, 0xDB, 0x5A, 0x60, 0x83, 0xBE]
        let t = try cmac(salt, w)
        let keyID: [UInt8] = [0x62, 0x74, 0x6C, 0x65]   // "btle"
        let length: [UInt8] = [0x01, 0x00]
        let macKey = try cmac(t, [0] + keyID + n1 + n2 + a1 + a2 + length)
        let ltk = try cmac(t, [1] + keyID + n1 + n2 + a1 + a2 + length)
        return (macKey, ltk)
    }

    /// f6: DHKey check (§2.2.8).
    public static func f6(w: [UInt8], n1: [UInt8], n2: [UInt8], r: [UInt8], ioCap: [UInt8], a1: [UInt8], a2: [UInt8]) throws -> [UInt8] {
        guard n1.count == 16, n2.count == 16, r.count == 16, ioCap.count == 3, a1.count == 7, a2.count == 7 else { throw Failure.badLength("f6") }
        return try cmac(w, n1 + n2 + r + ioCap + a1 + a2)
    }

    /// g2: the six-digit numeric comparison value before `mod 10^6` (§2.2.9).
    public static func g2(u: [UInt8], v: [UInt8], x: [UInt8], y: [UInt8]) throws -> UInt32 {
        guard u.count == 32, v.count == 32, y.count == 16 else { throw Failure.badLength("g2") }
        let m = try cmac(x, u + v + y)
        return m[12...].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// h6: link key conversion (§2.2.10).
    public static func h6(w: [UInt8], keyID: [UInt8]) throws -> [UInt8] {
        guard keyID.count == 4 else { throw Failure.badLength("h6") }
        return try cmac(w, keyID)
    }

    /// h7: link key conversion with a salt (§2.2.11).
    public static func h7(salt: [UInt8], w: [UInt8]) throws -> [UInt8] { try cmac(salt, w) }

    /// ah: random address hash (§2.2.2): the low 24 bits of e(k, padding || r).
    public static func ah(k: [UInt8], r: [UInt8]) throws -> [UInt8] {
        guard r.count == 3 else { throw Failure.badLength("ah") }
        return Array(try e(k, [UInt8](repeating: 0, count: 13) + r)[13...])
    }

    /// Elliptic-curve Diffie-Hellman on P-256 (§2.3.5.6.1): the DHKey (the x coordinate), given our private
    /// key and the peer's public key as x and y (32 octets each).
    public static func dhKey(privateKey: [UInt8], peerX: [UInt8], peerY: [UInt8]) throws -> [UInt8] {
        do {
            let priv = try P256.KeyAgreement.PrivateKey(rawRepresentation: privateKey)
            let pub = try P256.KeyAgreement.PublicKey(rawRepresentation: peerX + peerY)
            let secret = try priv.sharedSecretFromKeyAgreement(with: pub)
            return secret.withUnsafeBytes { Array($0) }
        } catch {
            // An invalid point (not on the curve) is how a peer's bad key shows up: DHKey Check fails.
            throw Failure.crypto("P-256 key agreement: \(error)")
        }
    }

    /// A fresh P-256 private key (32 octets, most significant first).
    public static func generatePrivateKey() -> [UInt8] {
        Array(P256.KeyAgreement.PrivateKey().rawRepresentation)
    }

    /// The public key (x, y) of a private key.
    public static func publicKey(privateKey: [UInt8]) throws -> (x: [UInt8], y: [UInt8]) {
        let raw = Array(try P256.KeyAgreement.PrivateKey(rawRepresentation: privateKey).publicKey.rawRepresentation)
        return (Array(raw[0..<32]), Array(raw[32..<64]))
    }
}
