// Choosing the association model from both devices' Pairing Request and Pairing Response
// (Vol 3 Part H §2.3.5.1, Tables 2.6–2.8).

public enum PairingMethodSelection {
    /// The method both sides will use. `secureConnections` is true when both set the SC flag.
    public static func method(initiator i: PairingFeatures, responder r: PairingFeatures, secureConnections sc: Bool) -> PairingMethod {
        if sc {
            if i.oobDataPresent || r.oobDataPresent { return .outOfBand }
        } else if i.oobDataPresent && r.oobDataPresent {
            return .outOfBand
        }
        guard i.authRequirements.contains(.mitm) || r.authRequirements.contains(.mitm) else { return .justWorks }
        return ioMethod(initiator: i.ioCapability, responder: r.ioCapability, secureConnections: sc)
    }

    /// Table 2.8: rows are the initiator's IO capabilities, columns the responder's.
    public static func ioMethod(initiator i: IOCapability, responder r: IOCapability, secureConnections sc: Bool) -> PairingMethod {
        switch (i, r) {
        case (.noInputNoOutput, _), (_, .noInputNoOutput): return .justWorks
        case (.displayOnly, .displayOnly), (.displayOnly, .displayYesNo), (.displayYesNo, .displayOnly): return .justWorks
        case (.displayOnly, .keyboardOnly), (.displayOnly, .keyboardDisplay): return .passkeyEntry
        case (.displayYesNo, .displayYesNo): return sc ? .numericComparison : .justWorks
        case (.displayYesNo, .keyboardOnly): return .passkeyEntry
        case (.displayYesNo, .keyboardDisplay): return sc ? .numericComparison : .passkeyEntry
        case (.keyboardOnly, _): return .passkeyEntry
        case (.keyboardDisplay, .displayOnly), (.keyboardDisplay, .keyboardOnly): return .passkeyEntry
        case (.keyboardDisplay, .displayYesNo), (.keyboardDisplay, .keyboardDisplay): return sc ? .numericComparison : .passkeyEntry
        }
    }

    /// For Passkey Entry: which side types the passkey (the other displays it; both type when both are keyboard-only).
    public static func passkeyInput(initiator i: IOCapability, responder r: IOCapability) -> (initiatorInputs: Bool, responderInputs: Bool) {
        switch (i, r) {
        case (.keyboardOnly, .keyboardOnly): return (true, true)
        case (.keyboardOnly, _): return (true, false)
        case (_, .keyboardOnly): return (false, true)
        case (.displayOnly, _), (.displayYesNo, _): return (false, true)
        case (.keyboardDisplay, .keyboardDisplay), (.keyboardDisplay, .displayOnly), (.keyboardDisplay, .displayYesNo): return (true, false)
        default: return (true, false)
        }
    }
}
