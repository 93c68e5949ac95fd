// swift-tools-version: 6.1
// The seeds' heart-rate monitor app and its tests with CoreBluetoothTesting: `swift test` in this folder.
// The app uses nothing but the Core Bluetooth API; only the tests touch the simulation kit.
import PackageDescription

let package = Package(
    name: "HeartRateTesting",
    dependencies: [
        // OpenCoreBluetooth, two levels up (in your project: .package(url: "…/OpenCoreBluetooth", from: "…")).
        .package(name: "OpenCoreBluetooth", path: "../..")
    ],
    targets: [
        .target(name: "HeartRateMonitor", dependencies: [.product(name: "CoreBluetooth", package: "OpenCoreBluetooth")]),
        .testTarget(
            name: "HeartRateMonitorTests",
            dependencies: [
                "HeartRateMonitor",
                .product(name: "CoreBluetooth", package: "OpenCoreBluetooth"),
                .product(name: "CoreBluetoothTesting", package: "OpenCoreBluetooth"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
