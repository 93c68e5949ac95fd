// CBError and CBATTError: codes, domains, NSError bridging, descriptions and pattern matching (§2.3, §2.4, C13).
import CoreBluetooth
import Foundation
import Testing

@Suite struct CBErrorTests {
    @Test func codeRawValues() {
        let expected: [(CBError.Code, Int)] = [
            (.unknown, 0), (.invalidParameters, 1), (.invalidHandle, 2), (.notConnected, 3), (.outOfSpace, 4),
            (.operationCancelled, 5), (.connectionTimeout, 6), (.peripheralDisconnected, 7), (.uuidNotAllowed, 8),
            (.alreadyAdvertising, 9), (.connectionFailed, 10), (.connectionLimitReached, 11), (.unknownDevice, 12),
            (.operationNotSupported, 13), (.peerRemovedPairingInformation, 14), (.encryptionTimedOut, 15),
            (.tooManyLEPairedDevices, 16), (.leGattExceededBackgroundNotificationLimit, 17),
            (.leGattNearBackgroundNotificationLimit, 18),
        ]
        for (code, raw) in expected {
            #expect(code.rawValue == raw)
            #expect(CBError.Code(rawValue: raw) == code)
        }
    }

    @available(*, deprecated)
    @Test func misspeltAliasIsUnknownDevice() {
        #expect(CBError.Code.unkownDevice == .unknownDevice)
        #expect(CBError.unkownDevice.rawValue == 12)
    }

    @Test func bridgesToNSErrorWithDomainAndCode() {
        let error: Error = CBError(.peripheralDisconnected)
        let ns = error as NSError
        #expect(ns.domain == "CBErrorDomain")
        #expect(ns.code == 7)
        #expect(CBError.errorDomain == "CBErrorDomain")
        #expect((error as? CBError)?.code == .peripheralDisconnected)
        #expect((error as? CBError)?.errorCode == 7)
    }

    @Test func knownDescriptions() {
        #expect(CBError(.peripheralDisconnected).localizedDescription == "The specified device has disconnected from us.")
        #expect(CBError(.connectionTimeout).localizedDescription == "The connection has timed out unexpectedly.")
        #expect(CBError(.peerRemovedPairingInformation).localizedDescription == "Peer removed pairing information")
        #expect(CBError(.unknown).localizedDescription == "Unknown error.")
        #expect(CBError(.notConnected).localizedDescription == "The specified device is not connected.")
        let error: Error = CBError(.connectionTimeout)
        #expect((error as NSError).localizedDescription == "The connection has timed out unexpectedly.")
    }

    @Test func userInfoDescriptionWins() {
        let e = CBError(.unknown, userInfo: [NSLocalizedDescriptionKey: "custom"])
        #expect(e.localizedDescription == "custom")
        #expect(e.userInfo[NSLocalizedDescriptionKey] as? String == "custom")
    }

    @Test func patternMatchingInCatch() {
        func fail() throws { throw CBError(.connectionTimeout) }
        var matched = ""
        do { try fail() } catch CBError.peripheralDisconnected {
            matched = "disconnected"
        } catch CBError.connectionTimeout {
            matched = "timeout"
        } catch {
            matched = "other"
        }
        #expect(matched == "timeout")
    }

    @Test func rawNSErrorOfTheDomainMatchesAndConverts() {
        let ns = NSError(domain: CBErrorDomain, code: 7)
        #expect(CBError.peripheralDisconnected ~= ns)
        #expect(!(CBError.connectionTimeout ~= ns))
        #expect(CBError(_nsError: ns).code == .peripheralDisconnected)
        // Same code in another domain does not match.
        #expect(!(CBError.peripheralDisconnected ~= NSError(domain: CBATTErrorDomain, code: 7)))
    }

    @Test func equalityByCode() {
        #expect(CBError(.outOfSpace) == CBError(.outOfSpace))
        #expect(CBError(.outOfSpace) != CBError(.invalidHandle))
        #expect(Set([CBError(.outOfSpace), CBError(.outOfSpace)]).count == 1)
    }
}

@Suite struct CBATTErrorTests {
    @Test func codeRawValues() {
        let expected: [(CBATTError.Code, Int)] = [
            (.success, 0x00), (.invalidHandle, 0x01), (.readNotPermitted, 0x02), (.writeNotPermitted, 0x03),
            (.invalidPdu, 0x04), (.insufficientAuthentication, 0x05), (.requestNotSupported, 0x06),
            (.invalidOffset, 0x07), (.insufficientAuthorization, 0x08), (.prepareQueueFull, 0x09),
            (.attributeNotFound, 0x0A), (.attributeNotLong, 0x0B), (.insufficientEncryptionKeySize, 0x0C),
            (.invalidAttributeValueLength, 0x0D), (.unlikelyError, 0x0E), (.insufficientEncryption, 0x0F),
            (.unsupportedGroupType, 0x10), (.insufficientResources, 0x11),
        ]
        for (code, raw) in expected {
            #expect(code.rawValue == raw)
            #expect(CBATTError.Code(rawValue: raw) == code)
        }
    }

    @Test func applicationAndProfileCodesAreKept() {
        for raw in [0x12, 0x80, 0x9F, 0xE0, 0xF2, 0xFD, 0xFF] {
            guard let code = CBATTError.Code(rawValue: raw) else {
                Issue.record("Code(rawValue: \(raw)) rejected a value iOS passes through")
                continue
            }
            #expect(code.rawValue == raw)
            #expect(code == .other(raw))
            let ns = CBATTError(code) as NSError
            #expect(ns.domain == "CBATTErrorDomain" && ns.code == raw)
        }
        #expect(CBATTError(.other(242)).localizedDescription == "Unknown ATT error.")
        // A named code spelt as `.other` is still that code.
        #expect(CBATTError.Code.other(0x0F) == .insufficientEncryption)
    }

    @Test func bridgingAndDescriptions() {
        let error: Error = CBATTError(.insufficientEncryption)
        let ns = error as NSError
        #expect(ns.domain == "CBATTErrorDomain")
        #expect(ns.code == 15)
        #expect(CBATTError.errorDomain == "CBATTErrorDomain")
        #expect(error.localizedDescription == "Encryption is insufficient.")
        #expect(CBATTError(.writeNotPermitted).localizedDescription == "Writing is not permitted.")
        #expect(CBATTError(.insufficientAuthentication).localizedDescription == "Authentication is insufficient.")
        #expect(CBATTError(.attributeNotFound).localizedDescription == "The attribute could not be found.")
        #expect((error as? CBATTError)?.code == .insufficientEncryption)
    }

    @Test func patternMatchingInCatch() {
        func fail(_ code: CBATTError.Code) throws { throw CBATTError(code) }
        func classify(_ code: CBATTError.Code) -> String {
            do { try fail(code) } catch CBATTError.insufficientEncryption {
                return "encryption"
            } catch CBATTError.insufficientAuthentication {
                return "authentication"
            } catch let e as CBATTError where e.code == .other(0x80) {
                return "application"
            } catch {
                return "other"
            }
            return "none"
        }
        #expect(classify(.insufficientEncryption) == "encryption")
        #expect(classify(.insufficientAuthentication) == "authentication")
        #expect(classify(.other(0x80)) == "application")
        #expect(classify(.readNotPermitted) == "other")
        // A CBError with the same number is not an ATT error.
        #expect(!(CBATTError.insufficientEncryption ~= CBError(.encryptionTimedOut)))
    }

    @Test func switchOverCodes() {
        func name(_ code: CBATTError.Code) -> String {
            switch code {
            case .success: return "ok"
            case .invalidOffset: return "offset"
            default: return "\(code.rawValue)"
            }
        }
        #expect(name(CBATTError.Code(rawValue: 0)!) == "ok")
        #expect(name(CBATTError.Code(rawValue: 7)!) == "offset")
        #expect(name(CBATTError.Code(rawValue: 0xE1)!) == "225")
    }
}
