// swift-tools-version: 6.1
// OpenCoreBluetooth: a Bluetooth Low Energy host stack in pure Swift, with Apple's Core Bluetooth API on Linux.
//
// One target per layer; dependencies point down only (toward BLEWire). Protocol modules never import
// each other; only BLEHost wires them together.
import PackageDescription

let package = Package(
    name: "OpenCoreBluetooth",
    products: [
        .library(name: "CoreBluetooth", targets: ["CoreBluetooth"]),
        .library(name: "CoreBluetoothTesting", targets: ["CoreBluetoothTesting"]),
        .library(name: "BLEVirtualRadio", targets: ["BLEVirtualRadio"]),
        .library(name: "BLEHost", targets: ["BLEHost"]),
        .executable(name: "ble", targets: ["ble"]),
        .library(name: "MultipeerConnectivity", targets: ["MultipeerConnectivity"]),
        .library(name: "GameKit", targets: ["GameKit"]),
        .library(name: "DNSSD", targets: ["DNSSD"]),
        .library(name: "DNSSDNIO", targets: ["DNSSDNIO"]),
        .executable(name: "dnssd-tool", targets: ["dnssd-tool"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
    ],
    targets: [
        .target(name: "BLEWire"),
        .target(name: "BoundStreams"),
        .target(name: "BLEHCI", dependencies: ["BLEWire"]),
        .target(name: "BLECrypto", dependencies: [
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
        ]),
        .target(name: "BLEL2CAP", dependencies: ["BLEWire"]),
        .target(name: "BLESMP", dependencies: ["BLEWire", "BLECrypto"]),
        .target(name: "BLEATT", dependencies: ["BLEWire"]),
        .target(name: "BLEGATT", dependencies: ["BLEATT", "BLEWire"]),
        .target(name: "BLEGAP", dependencies: ["BLEWire"]),
        .target(name: "BLETransport", dependencies: ["BLEHCI", "BLEWire"]),
        .target(name: "BLETransportLinux", dependencies: ["BLETransport", "BLEHCI"]),
        .target(name: "BLEVirtualRadio", dependencies: ["BLETransport", "BLEHCI", "BLEWire", "BLECrypto"]),
        .target(name: "BLEHost", dependencies: [
            "BLEWire", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLESMP", "BLECrypto", "BLETransport", "BLETransportLinux", "BLEVirtualRadio",
        ]),
        .target(name: "CoreBluetooth", dependencies: ["BLEHost", "BLEGATT", "BLEGAP", "BLESMP", "BLEL2CAP", "BLETransport", "BLEWire", "BoundStreams"]),
        .executableTarget(name: "ble", dependencies: [
            "CoreBluetooth", "MultipeerConnectivity", "GameKit", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLESMP", "BLEWire",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        // Discovery: a pure mDNS/DNS-SD codec and responder/querier, and its SwiftNIO socket edge.
        .target(name: "DNSSD"),
        .target(name: "PeerSession", dependencies: ["BLEWire"]),
        .target(name: "PeerTransport", dependencies: [
            "PeerSession",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "NIOTLS", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        .target(name: "PeerBluetooth", dependencies: [
            "BLEWire", "BLEHCI", "BLEL2CAP", "BLEGAP", "BLETransport", "BLEHost", "PeerSession", "PeerTransport",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
        ]),
        .target(name: "MultipeerConnectivity", dependencies: ["PeerSession", "PeerTransport", "PeerBluetooth", "DNSSDNIO", "DNSSD", "BoundStreams"]),
        .target(name: "GameKit", dependencies: ["MultipeerConnectivity"]),
        // Tests/TestSupport: what several test targets share (waiting without Task.sleep; see Pause.swift).
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "GameKitTests", dependencies: ["GameKit", "MultipeerConnectivity"]),
        .testTarget(name: "PeerSessionTests", dependencies: ["PeerSession"]),
        .testTarget(name: "MultipeerConnectivityTests", dependencies: [
            "MultipeerConnectivity", "PeerSession", "PeerTransport", "PeerBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEWire",
        ]),
        .target(name: "DNSSDNIO", dependencies: [
            "DNSSD",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ]),
        .executableTarget(name: "dnssd-tool", dependencies: ["DNSSDNIO", "DNSSD"]),
        .testTarget(name: "DNSSDTests", dependencies: ["DNSSD"]),
        .testTarget(name: "DNSSDNIOTests", dependencies: ["DNSSDNIO", "DNSSD", "dnssd-tool"]),
        // Fuzzing (issue 16). Each Fuzz<Name> defines libFuzzer's entry point; scripts/fuzz builds them with
        // -sanitize=fuzzer,address -D FUZZING (their entry runs libFuzzer's driver). A plain build makes them
        // corpus replayers with a @main of their own, so `swift build` of the whole package is unaffected.
        .target(name: "FuzzDriver", path: "Sources/Fuzz/Driver"),
        .target(name: "FuzzSupport", dependencies: ["FuzzDriver"], path: "Sources/Fuzz/Support"),
        .executableTarget(name: "FuzzH4", dependencies: ["FuzzSupport", "BLEHCI"], path: "Sources/Fuzz/H4"),
        .executableTarget(name: "FuzzHCIEvent", dependencies: ["FuzzSupport", "BLEHCI", "BLEWire"], path: "Sources/Fuzz/HCIEvent"),
        .executableTarget(name: "FuzzL2CAP", dependencies: ["FuzzSupport", "BLEL2CAP", "BLEHCI"], path: "Sources/Fuzz/L2CAP"),
        .executableTarget(name: "FuzzATT", dependencies: ["FuzzSupport", "BLEATT", "BLEWire"], path: "Sources/Fuzz/ATT"),
        .executableTarget(name: "FuzzSMP", dependencies: ["FuzzSupport", "BLESMP", "BLEWire"], path: "Sources/Fuzz/SMP"),
        .executableTarget(name: "FuzzAdvertisingData", dependencies: ["FuzzSupport", "BLEGAP", "BLEWire"], path: "Sources/Fuzz/AdvertisingData"),
        .executableTarget(name: "FuzzGATTFile", dependencies: ["FuzzSupport", "BLEGATT"], path: "Sources/Fuzz/GATTFile"),
        .executableTarget(name: "FuzzBTSnoop", dependencies: ["FuzzSupport", "BLETransport", "BLEHCI"], path: "Sources/Fuzz/BTSnoop"),
        .executableTarget(name: "FuzzHost", dependencies: [
            "FuzzSupport", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEATT", "BLEGATT", "BLEWire",
        ], path: "Sources/Fuzz/Host"),
        .testTarget(name: "BLEWireTests", dependencies: ["BLEWire"]),
        .testTarget(name: "BoundStreamsTests", dependencies: ["BoundStreams"]),
        .testTarget(name: "BLECryptoTests", dependencies: ["BLECrypto"]),
        .testTarget(name: "BLESMPTests", dependencies: ["BLESMP", "BLECrypto", "BLEWire"]),
        .testTarget(name: "BLEHCITests", dependencies: ["BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEL2CAPTests", dependencies: ["BLEL2CAP", "BLEWire"]),
        .testTarget(name: "BLEATTTests", dependencies: ["BLEATT", "BLEWire"]),
        .testTarget(name: "BLEGATTTests", dependencies: ["BLEGATT", "BLEATT", "BLEWire"]),
        .testTarget(name: "BLEGAPTests", dependencies: ["BLEGAP", "BLEWire"]),
        .testTarget(name: "BLETransportTests", dependencies: ["TestSupport", "BLETransport", "BLETransportLinux", "BLEVirtualRadio", "BLEHost", "BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEVirtualRadioTests", dependencies: ["TestSupport", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEWire", "BLECrypto"]),
        .testTarget(name: "BLEHostTests", dependencies: ["BLEHost", "BLEVirtualRadio", "BLEGATT", "BLEATT", "BLEGAP", "BLEHCI", "BLEWire"]),
        .testTarget(name: "CoreBluetoothTests", dependencies: ["TestSupport", "CoreBluetooth", "BoundStreams", "BLEVirtualRadio", "BLEHost", "BLETransport", "BLEHCI", "BLEATT", "BLEWire"]),
        // CoreBluetoothTesting (issue 24): simulated peripherals, faults and a virtual clock for testing Core Bluetooth apps.
        .target(name: "CoreBluetoothTesting", dependencies: ["CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLEWire"]),
        // examples/heart-rate-testing: a package of its own (`swift test` there); its app and tests are built here too, under
        // other target names, so that the whole test run covers them without a second build of the package.
        .target(name: "HeartRateMonitorExample", dependencies: ["CoreBluetooth"], path: "examples/heart-rate-testing/Sources/HeartRateMonitor"),
        .testTarget(name: "HeartRateMonitorExampleTests", dependencies: ["HeartRateMonitorExample", "CoreBluetooth", "CoreBluetoothTesting"],
                    path: "examples/heart-rate-testing/Tests/HeartRateMonitorTests"),
        .testTarget(name: "CoreBluetoothTestingTests", dependencies: ["CoreBluetoothTesting", "CoreBluetooth", "TestSupport", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEGATT", "BLEWire"]),
        // examples/firmware-update: app code against the Core Bluetooth API only; in no product (swift build --product ble skips it), run by its test.
        .target(name: "FirmwareUpdateExample", dependencies: ["CoreBluetooth", .product(name: "Crypto", package: "swift-crypto")],
                path: "examples/firmware-update", exclude: ["README.md"]),
        .testTarget(name: "FirmwareUpdateExampleTests", dependencies: ["FirmwareUpdateExample"]),
        .testTarget(name: "BLEToolTests", dependencies: ["BLEHost", "BLEVirtualRadio", "BLETransport", "BLEWire"], exclude: ["Golden"]),
        .testTarget(name: "InteropTests", dependencies: ["TestSupport", "CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLESMP", "BLEGATT", "BLEHCI", "BLEL2CAP", "BLEWire",
                                                  .product(name: "Crypto", package: "swift-crypto")], exclude: ["peers"]),
    ],
    swiftLanguageModes: [.v6]
)
