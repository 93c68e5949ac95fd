// Apple's frameworks are Clang modules with a submodule per header, and Swift code imports them that way.
// Each name below is one of Apple's headers; this file compiling is the check (see
// Sources/*Submodules/include/module.modulemap for how a Swift module gets submodules).
import MultipeerConnectivity.MCPeerID
import MultipeerConnectivity.MCSession
import MultipeerConnectivity.MCError
import MultipeerConnectivity.MCNearbyServiceAdvertiser
import MultipeerConnectivity.MCNearbyServiceBrowser
import MultipeerConnectivity.MCAdvertiserAssistant
import MultipeerConnectivity.MCBrowserViewController
import GameKit.GKSession
import GameKit.GKSessionError
import GameKit.GKPeerPickerController
import GameKit.GKPublicConstants
import GameKit.GKPublicProtocols
import GameKit.GKDefines
import CoreBluetooth.CBCentralManager
import CoreBluetooth.CBPeripheral
import CoreBluetooth.CBPeripheralManager
import CoreBluetooth.CBL2CAPChannel
import CoreBluetooth.CBUUID
import CoreBluetooth.CBError
import CoreBluetooth.CBAdvertisementData
import CoreBluetooth.CBATTRequest
import CoreBluetooth.CBAttribute
import CoreBluetooth.CBCentral
import CoreBluetooth.CBCentralManagerConstants
import CoreBluetooth.CBCharacteristic
import CoreBluetooth.CBDescriptor
import CoreBluetooth.CBManager
import CoreBluetooth.CBPeer
import CoreBluetooth.CBPeripheralManagerConstants
import CoreBluetooth.CBService
import CoreBluetooth.CoreBluetoothDefines

/// Types reached through submodule imports alone (this file imports no framework as a whole).
enum ThroughSubmodules {
    static func names() -> [String] {
        [
            String(describing: MCPeerID.self), String(describing: GKSession.self), String(describing: CBUUID.self),
            MCPeerID(displayName: "sub").displayName, CBUUID(string: "180D").uuidString,
        ]
    }
}
