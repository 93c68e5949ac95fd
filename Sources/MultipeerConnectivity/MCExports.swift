// `import MultipeerConnectivity` brings Foundation with it, as on Apple platforms.
@_exported import Foundation
