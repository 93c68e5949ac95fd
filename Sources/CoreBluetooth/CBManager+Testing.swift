// What the test kit (CoreBluetoothTesting, a library of this package) needs from the managers: the queues
// their delegates run on, so that it can tell when an app has finished reacting to what the radio did.
import Dispatch
import BLEHost

/// The delegate queues of the managers on `host` (each once). Call on the host's loop.
package func delegateQueues(ofManagersOn host: LEHost) -> [DispatchQueue] {
    var seen = Set<ObjectIdentifier>()
    return HostHub.of(host).delegateQueues.filter { seen.insert(ObjectIdentifier($0)).inserted }
}
