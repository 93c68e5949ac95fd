// `import CoreBluetooth` brings Foundation and Dispatch with it, as it does on Apple platforms: files that
// import only CoreBluetooth may use NSObject, UUID, Data, NSNumber and DispatchQueue.
@_exported import Foundation
@_exported import Dispatch
