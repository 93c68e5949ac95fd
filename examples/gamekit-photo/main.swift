// Runs the seed's GameKit ViewController as one phone of the photo exchange: it shows the peer picker (the
// first peer found is chosen; the other phone's "accept?" is answered yes, as a user would tap), and once
// connected either sends a photo (the user's select + send taps) or waits for one and saves it.
//
//   GameKitPhotoExample [--name LABEL] [--send PHOTO] [--save-to FILE] [--duration SECONDS]
import GameKit

var arguments = CommandLine.arguments.dropFirst()
var options: [String: String] = [:]
while let key = arguments.popFirst() {
    guard key.hasPrefix("--"), let value = arguments.popFirst() else {
        FileHandle.standardError.write(Data("usage: GameKitPhotoExample [--name LABEL] [--send PHOTO] [--save-to FILE] [--duration S]\n".utf8))
        exit(2)
    }
    options[String(key.dropFirst(2))] = value
}
setvbuf(stdout, nil, _IOLBF, 0)

// A label for this process's lines. The seed's delegate does not implement peerPickerController(_:sessionFor:),
// so the picker makes the session itself, as on iOS: session ID the program's name, display name the device's.
let name = options["name"] ?? ProcessInfo.processInfo.hostName
let viewController = ViewController()
if let save = options["save-to"] { viewController.album = URL(fileURLWithPath: save) }
viewController.viewDidLoad()
print("\(name): looking for peers")

let duration = Double(options["duration"] ?? "60") ?? 60
DispatchQueue.main.asyncAfter(deadline: .now() + duration) {
    print("\(name): gave up after \(duration) s")
    exit(1)
}
// The user's taps once the picker has connected: select a photo, send it; a receiver waits for one.
func poll() {
    if viewController.session != nil {
        if let photo = options["send"] {
            viewController.selectClick(URL(fileURLWithPath: photo))
            viewController.sendClick()
            print("\(name): sent \(viewController.image?.count ?? 0) bytes")
            // Stay a moment so the reliable send drains before the process (and its session) ends.
            DispatchQueue.main.asyncAfter(deadline: .now() + 3) { exit(0) }
            return
        }
        if options["save-to"] != nil, let image = viewController.image {
            print("\(name): received \(image.count) bytes")
            DispatchQueue.main.asyncAfter(deadline: .now() + 0.5) { exit(0) }
            return
        }
    }
    DispatchQueue.main.asyncAfter(deadline: .now() + 0.05, execute: poll)
}
poll()
dispatchMain()
