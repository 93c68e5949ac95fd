// Swift concurrency beside the delegates (never instead of them): an AsyncStream of the manager's events,
// which any number of listeners can hold at once, and async versions of connect.
import Foundation

/// One discovery, as an event.
public struct CBDiscovery: @unchecked Sendable {
    public let peripheral: CBPeripheral
    let advertisementDataBox: UncheckedBox<[String: Any]>
    public var advertisementData: [String: Any] { advertisementDataBox.value }
    public let rssi: Int

    init(peripheral: CBPeripheral, advertisementData: UncheckedBox<[String: Any]>, rssi: Int) {
        self.peripheral = peripheral
        self.advertisementDataBox = advertisementData
        self.rssi = rssi
    }
}

/// What a central manager's delegate hears, as values.
public enum CBCentralManagerEvent: @unchecked Sendable {
    case stateUpdated(CBManagerState)
    case discovered(CBDiscovery)
    case connected(CBPeripheral)
    case failedToConnect(CBPeripheral, any Error)
    case disconnected(CBPeripheral, UncheckedBox<any Error>?)

    /// The disconnection error, if any (nil after a local cancel).
    public var disconnectionError: (any Error)? {
        if case let .disconnected(_, e) = self { return e?.value }
        return nil
    }
}

/// Listeners of one object's events (delegate queue).
final class EventListeners<Event: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var listeners: [UUID: AsyncStream<Event>.Continuation] = [:]

    func stream() -> AsyncStream<Event> {
        AsyncStream { c in
            let id = UUID()
            lock.withLock { listeners[id] = c }
            c.onTermination = { [weak self] _ in self?.lock.withLock { _ = self?.listeners.removeValue(forKey: id) } }
        }
    }

    func yield(_ e: Event) {
        for c in lock.withLock({ Array(listeners.values) }) { c.yield(e) }
    }

    func finishAll() {
        for c in lock.withLock({ () -> [AsyncStream<Event>.Continuation] in
            let v = Array(listeners.values); listeners.removeAll(); return v
        }) { c.finish() }
    }
}

extension CBCentralManager {
    /// Every event of this manager from now on, in the order the delegate hears them. Each call gives a
    /// new, independent stream; it ends when the task consuming it is cancelled.
    public var events: AsyncStream<CBCentralManagerEvent> { eventListeners.stream() }

    func broadcast(_ e: CBCentralManagerEvent) { eventListeners.yield(e) }

    /// Waits until the manager is powered on; throws CBError.Code.unsupported if it never can be.
    public func waitUntilPoweredOn() async throws {
        let stream = events
        if state == .poweredOn { return }
        if state == .unsupported { throw CBError(.operationNotSupported) }
        for await e in stream {
            if case let .stateUpdated(s) = e {
                if s == .poweredOn { return }
                if s == .unsupported || s == .unauthorized { throw CBError(.operationNotSupported) }
            }
        }
        throw CancellationError()
    }

    /// Scans and returns the discoveries as a stream; the scan stops when the stream is dropped.
    public func discoveries(withServices services: [CBUUID]?, options: [String: Any]? = nil) -> AsyncStream<CBDiscovery> {
        let box = UncheckedBox(options)
        return AsyncStream { c in
            // Listen before scanning starts, so that no discovery is missed.
            let stream = events
            let task = Task {
                for await e in stream { if case let .discovered(d) = e { c.yield(d) } }
            }
            scanForPeripherals(withServices: services, options: box.value)
            c.onTermination = { [weak self] _ in
                task.cancel(); self?.stopScan()
            }
        }
    }

    /// Connects and returns when connected; throws the didFailToConnect error, or CancellationError (and
    /// cancels the connection) if the task is cancelled.
    public func connectAndWait(_ peripheral: CBPeripheral, options: [String: Any]? = nil) async throws {
        let stream = events
        connect(peripheral, options: options)
        if peripheral.state == .connected { return }
        try await withTaskCancellationHandler {
            for await e in stream {
                switch e {
                case let .connected(p) where p === peripheral: return
                case let .failedToConnect(p, error) where p === peripheral: throw error
                case let .disconnected(p, error) where p === peripheral: throw error?.value ?? CancellationError()
                default: continue
                }
            }
            throw CancellationError()
        } onCancel: { [weak self] in
            self?.cancelPeripheralConnection(peripheral)
        }
    }
}
