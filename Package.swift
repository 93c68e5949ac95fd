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
        .library(name: "BLEVirtualRadio", targets: ["BLEVirtualRadio"]),
        .library(name: "BLEHost", targets: ["BLEHost"]),
        .executable(name: "ble", targets: ["ble"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        .target(name: "BLEWire"),
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
        .target(name: "BoundStreams"),
        .target(name: "CoreBluetooth", dependencies: ["BLEHost", "BLEGATT", "BLEGAP", "BLESMP", "BLEWire"]),
        .executableTarget(name: "ble", dependencies: [
            "CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEL2CAP", "BLEATT", "BLEGATT", "BLEGAP", "BLESMP", "BLEWire",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
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
        .testTarget(name: "BLECryptoTests", dependencies: ["BLECrypto"]),
        .testTarget(name: "BLESMPTests", dependencies: ["BLESMP", "BLECrypto", "BLEWire"]),
        .testTarget(name: "BLEHCITests", dependencies: ["BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEL2CAPTests", dependencies: ["BLEL2CAP", "BLEWire"]),
        .testTarget(name: "BLEATTTests", dependencies: ["BLEATT", "BLEWire"]),
        .testTarget(name: "BLEGATTTests", dependencies: ["BLEGATT", "BLEATT", "BLEWire"]),
        .testTarget(name: "BLEGAPTests", dependencies: ["BLEGAP", "BLEWire"]),
        .testTarget(name: "BLETransportTests", dependencies: ["BLETransport", "BLETransportLinux", "BLEVirtualRadio", "BLEHost", "BLEHCI", "BLEWire"]),
        .testTarget(name: "BLEVirtualRadioTests", dependencies: ["BLEVirtualRadio", "BLETransport", "BLEHCI", "BLEWire", "BLECrypto"]),
        .testTarget(name: "BLEHostTests", dependencies: ["BLEHost", "BLEVirtualRadio", "BLEGATT", "BLEATT", "BLEGAP", "BLEHCI", "BLEWire"]),
        .testTarget(name: "CoreBluetoothTests", dependencies: ["CoreBluetooth", "BLEVirtualRadio", "BLEHost", "BLETransport", "BLEHCI", "BLEATT", "BLEWire"]),
        .testTarget(name: "BoundStreamsTests", dependencies: ["BoundStreams"]),
        .testTarget(name: "InteropTests", dependencies: ["CoreBluetooth", "BLEHost", "BLEVirtualRadio", "BLETransport", "BLESMP", "BLEGATT", "BLEHCI", "BLEWire"], exclude: ["peers"]),
    ],
    swiftLanguageModes: [.v6]
)
