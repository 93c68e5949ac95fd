// swift-tools-version: 6.1
// OpenCoreBluetooth: a Bluetooth Low Energy host stack in pure Swift, with Apple's Core Bluetooth API on Linux,
// and Multipeer Connectivity and GameKit peer sessions on top.
//
// Read the targets as the architecture, in layer order: one target per layer, dependencies pointing down only
// (toward BLEWire). Protocol machines never import each other and do no I/O; only BLEHost wires them together
// and executes their actions; transports are the I/O edges; the façades give Apple's API on top.
import PackageDescription

let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")

let package = Package(
    name: "OpenCoreBluetooth",
    products: [
        // Apple's APIs on Linux.
        .library(name: "CoreBluetooth", targets: ["CoreBluetooth"]),
        .library(name: "CoreBluetoothTesting", targets: ["CoreBluetoothTesting"]),
        .library(name: "MultipeerConnectivity", targets: ["MultipeerConnectivity"]),
        .library(name: "GameKit", targets: ["GameKit"]),
        // The stack's own layers an application or a test may use directly.
        .library(name: "BLEHost", targets: ["BLEHost"]),
        .library(name: "BLEVirtualRadio", targets: ["BLEVirtualRadio"]),
        .library(name: "DNSSD", targets: ["DNSSD"]),
        .library(name: "DNSSDNIO", targets: ["DNSSDNIO"]),
        // Tools.
        .executable(name: "ble", targets: ["ble"]),
        .executable(name: "dnssd-tool", targets: ["dnssd-tool"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        // Wire and foundations: little-endian bytes, UUIDs and addresses; the SMP crypto toolbox; bound streams; log labels.
        .target(name: "BLEWire"),
        .target(name: "BLECrypto", dependencies: [crypto, .product(name: "CryptoExtras", package: "swift-crypto")]),
        .target(name: "BoundStreams"),
        .target(name: "StackLog", dependencies: [logging]),

        // Protocol machines: pure state machines and codecs, no I/O, no clock; they never import each other.
        .target(name: "BLEHCI", dependencies: ["BLEWire"]),
        .target(name: "BLEL2CAP", dependencies: ["BLEWire"]),
        .target(name: "BLEATT", dependencies: ["BLEWire"]),
        .target(name: "BLEGATT", dependencies: ["BLEATT", "BLEWire"]),
        .target(name: "BLESMP", dependencies: ["BLEWire", "BLECrypto"]),
        .target(name: "BLEGAP", dependencies: ["BLEWire"]),

        // Host: the one place that wires the machines together and carries out their actions, on one event loop.
        .target(name: "BLEHost", dependencies: [
            "BLEWire", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLESMP", "BLECrypto", "BLETransport", "BLETransportLinux", "BLEVirtualRadio",
            "StackLog", logging,
        ]),

        // Transports: the event loop and H4 streams, Linux's HCI socket and UARTs, and the virtual radio below HCI.
        .target(name: "BLETransport", dependencies: ["BLEHCI", "BLEWire"]),
        .target(name: "BLETransportLinux", dependencies: ["BLETransport", "BLEHCI"]),
        .target(name: "BLEVirtualRadio", dependencies: ["BLETransport", "BLEHCI", "BLEWire", "BLECrypto"]),

        // Apple-API façades: Apple's Swift names and semantics, delegates on the queue given.
        .target(name: "CoreBluetooth", dependencies: [
            "BLEHost", "BLEGATT", "BLEGAP", "BLESMP", "BLEL2CAP", "BLETransport", "BLEWire", "BoundStreams", "StackLog", logging,
            "CoreBluetoothSubmodules", "DBus",
        ]),
        .target(name: "MultipeerConnectivity", dependencies: [
            "PeerSession", "PeerTransport", "PeerBluetooth", "DNSSDNIO", "DNSSD", "BoundStreams", "MultipeerConnectivitySubmodules",
        ]),
        .target(name: "GameKit", dependencies: ["MultipeerConnectivity", "StackLog", logging, "GameKitSubmodules"]),
        // `import CoreBluetooth.CBPeripheral` and the like (issue 21): a Clang module map named after each Swift
        // framework module, one submodule per Apple header; importing a submodule loads the Swift module as its
        // overlay. The same for MultipeerConnectivity and GameKit.
        .target(name: "CoreBluetoothSubmodules"),
        .target(name: "MultipeerConnectivitySubmodules"),
        .target(name: "GameKitSubmodules"),
        // CoreBluetoothTesting (issue 24): simulated peripherals, faults and a virtual clock for testing Core Bluetooth apps.
        .target(name: "CoreBluetoothTesting", dependencies: ["CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLEWire"]),

        // Peer-to-peer: the pure mDNS/DNS-SD engine and session protocol, and their NIO and Bluetooth edges.
        .target(name: "DNSSD"),
        // D-Bus: a pure wire codec and a UNIX-socket client (the BlueZ backend's way to bluetoothd).
        .target(name: "DBus"),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "TestSupport"]),
        // The BlueZ backend of CoreBluetooth against a fake bluetoothd (org.bluez) on a private bus.
        .testTarget(name: "BlueZTests", dependencies: [
            "CoreBluetooth", "DBus", "BLEWire", "TestSupport", "PeerBluetooth", "PeerSession", "PeerTransport", "MultipeerConnectivity", "GameKit",
        ]),
        .target(name: "PeerSession", dependencies: ["BLEWire"]),
        .target(name: "DNSSDNIO", dependencies: [
            "DNSSD", "StackLog", logging,
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
        ]),
        .target(name: "PeerTransport", dependencies: [
            "PeerSession", "StackLog", logging,
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "NIOTLS", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            crypto,
        ]),
        .target(name: "PeerBluetooth", dependencies: [
            "BLEWire", "BLEHCI", "BLEL2CAP", "BLEGAP", "BLETransport", "BLEHost", "PeerSession", "PeerTransport",
            // BLE_TRANSPORT=bluez: BlueZ over D-Bus, and the kernel's L2CAP sockets through CoreBluetooth's BlueZ backend.
            "DBus", "CoreBluetooth",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            crypto,
        ]),

        // Tools and examples: the `ble` toolbox, dnssd-tool, and app code against the Core Bluetooth API only
        // (examples/firmware-update is in no product, so `swift build --product ble` skips it; its test runs it).
        .executableTarget(name: "ble", dependencies: [
            "CoreBluetooth", "MultipeerConnectivity", "GameKit", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLESMP", "BLEWire",
            .product(name: "ArgumentParser", package: "swift-argument-parser"), crypto, logging,
        ]),
        .executableTarget(name: "dnssd-tool", dependencies: ["DNSSDNIO", "DNSSD"]),
        .target(name: "FirmwareUpdateExample", dependencies: ["CoreBluetooth", crypto], path: "examples/firmware-update", exclude: ["README.md"]),
        // examples/heart-rate-testing: a package of its own (`swift test` there); its app and tests are built here too, under
        // other target names, so that the whole test run covers them without a second build of the package.
        .target(name: "HeartRateMonitorExample", dependencies: ["CoreBluetooth"], path: "examples/heart-rate-testing/Sources/HeartRateMonitor"),
        // examples/gamekit-photo: the seed's GameKit view controller from Apple's Swift declarations (Swift 5 mode,
        // as apps are); in no product; GameKitTests runs two of it in two network namespaces.
        .executableTarget(name: "GameKitPhotoExample", dependencies: ["GameKit"], path: "examples/gamekit-photo",
                          swiftSettings: [.swiftLanguageMode(.v5)]),

        // Tests, mirroring the layers (Tests/TestSupport: what several test targets share, e.g. waiting without Task.sleep).
        .target(name: "TestSupport", dependencies: ["DBus"], path: "Tests/TestSupport"),
        .testTarget(name: "BLEWireTests", dependencies: ["BLEWire"]),
        .testTarget(name: "BLECryptoTests", dependencies: ["BLECrypto"]),
        .testTarget(name: "BoundStreamsTests", dependencies: ["BoundStreams"]),
        .testTarget(name: "BLEHCITests", dependencies: ["BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEL2CAPTests", dependencies: ["BLEL2CAP", "BLEWire"]),
        .testTarget(name: "BLEATTTests", dependencies: ["BLEATT", "BLEWire"]),
        .testTarget(name: "BLEGATTTests", dependencies: ["BLEGATT", "BLEATT", "BLEWire"]),
        .testTarget(name: "BLESMPTests", dependencies: ["BLESMP", "BLECrypto", "BLEWire"]),
        .testTarget(name: "BLEGAPTests", dependencies: ["BLEGAP", "BLEWire"]),
        .testTarget(name: "BLEHostTests", dependencies: ["BLEHost", "BLEVirtualRadio", "BLEGATT", "BLEATT", "BLEGAP", "BLEHCI", "BLEWire"]),
        .testTarget(name: "BLETransportTests", dependencies: ["TestSupport", "BLETransport", "BLETransportLinux", "BLEVirtualRadio", "BLEHost", "BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEVirtualRadioTests", dependencies: ["TestSupport", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEWire", "BLECrypto"]),
        .testTarget(name: "CoreBluetoothTests", dependencies: [
            "TestSupport", "CoreBluetooth", "BoundStreams", "BLEVirtualRadio", "BLEHost", "BLETransport", "BLEHCI", "BLEATT", "BLEWire", logging,
        ]),
        .testTarget(name: "HeartRateMonitorExampleTests", dependencies: ["HeartRateMonitorExample", "CoreBluetooth", "CoreBluetoothTesting"],
                    path: "examples/heart-rate-testing/Tests/HeartRateMonitorTests",
                    // Which module the test imports: not canImport, since the example's own build (scripts/test
                    // builds it in .build too) leaves a HeartRateMonitor module that this target does not link.
                    swiftSettings: [.define("OCB_EXAMPLE_INSIDE_PACKAGE")]),
        .testTarget(name: "CoreBluetoothTestingTests", dependencies: ["CoreBluetoothTesting", "CoreBluetooth", "TestSupport", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEGATT", "BLEWire"]),
        .testTarget(name: "MultipeerConnectivityTests", dependencies: [
            "MultipeerConnectivity", "PeerSession", "PeerTransport", "PeerBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEWire",
        ]),
        .testTarget(name: "GameKitTests", dependencies: ["GameKit", "MultipeerConnectivity", "GameKitPhotoExample"]),
        // Code written only from Apple's declarations (api-audit rows, the seeds' view controllers): a renamed or
        // missing symbol fails the build. Swift 5 mode, as most apps are.
        .testTarget(name: "SourceCompatTests", dependencies: ["CoreBluetooth", "MultipeerConnectivity", "GameKit"],
                    swiftSettings: [.swiftLanguageMode(.v5)]),
        .testTarget(name: "DNSSDTests", dependencies: ["DNSSD"]),
        .testTarget(name: "DNSSDNIOTests", dependencies: ["DNSSDNIO", "DNSSD", "dnssd-tool"]),
        .testTarget(name: "PeerSessionTests", dependencies: ["PeerSession"]),
        .testTarget(name: "BLEToolTests", dependencies: ["ble", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEWire"], exclude: ["Golden"]),
        .testTarget(name: "FirmwareUpdateExampleTests", dependencies: ["FirmwareUpdateExample"]),
        .testTarget(name: "InteropTests", dependencies: [
            "TestSupport", "CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLESMP", "BLEGATT", "BLEHCI", "BLEL2CAP", "BLEWire", crypto,
        ], exclude: ["peers"]),

        // Fuzzing (docs/fuzzing.md): each Fuzz<Name> defines libFuzzer's entry point; scripts/fuzz builds them with
        // -sanitize=fuzzer,address -D FUZZING. A plain build makes them corpus replayers with a @main of their own.
        .target(name: "FuzzDriver", path: "Sources/Fuzz/Driver"),
        .target(name: "FuzzSupport", dependencies: ["FuzzDriver"], path: "Sources/Fuzz/Support"),
        .executableTarget(name: "FuzzH4", dependencies: ["FuzzSupport", "BLEHCI"], path: "Sources/Fuzz/H4"),
        .executableTarget(name: "FuzzHCIEvent", dependencies: ["FuzzSupport", "BLEHCI", "BLEWire"], path: "Sources/Fuzz/HCIEvent"),
        .executableTarget(name: "FuzzL2CAP", dependencies: ["FuzzSupport", "BLEL2CAP", "BLEHCI"], path: "Sources/Fuzz/L2CAP"),
        .executableTarget(name: "FuzzATT", dependencies: ["FuzzSupport", "BLEATT", "BLEWire"], path: "Sources/Fuzz/ATT"),
        .executableTarget(name: "FuzzSMP", dependencies: ["FuzzSupport", "BLESMP", "BLEWire"], path: "Sources/Fuzz/SMP"),
        .executableTarget(name: "FuzzAdvertisingData", dependencies: ["FuzzSupport", "BLEGAP", "BLEWire"], path: "Sources/Fuzz/AdvertisingData"),
        .executableTarget(name: "FuzzGATTFile", dependencies: ["FuzzSupport", "BLEGATT"], path: "Sources/Fuzz/GATTFile"),
        .executableTarget(name: "FuzzDBus", dependencies: ["FuzzSupport", "DBus"], path: "Sources/Fuzz/DBus"),
        .executableTarget(name: "FuzzBTSnoop", dependencies: ["FuzzSupport", "BLETransport", "BLEHCI"], path: "Sources/Fuzz/BTSnoop"),
        .executableTarget(name: "FuzzHost", dependencies: [
            "FuzzSupport", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEATT", "BLEGATT", "BLEWire",
        ], path: "Sources/Fuzz/Host"),
    ],
    swiftLanguageModes: [.v6]
)
