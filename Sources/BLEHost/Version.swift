// Copyright 2026 the OpenCoreBluetooth authors
// SPDX-License-Identifier: Apache-2.0
//
// The package's version, as CHANGELOG.md lists it; `ble --version` prints it.

/// Facts about this package as a whole.
public enum OpenCoreBluetooth {
    /// The version of OpenCoreBluetooth this code is (Semantic Versioning; see CHANGELOG.md).
    public static let version = "0.1.0"
}
