// Writes an incoming resource's file off the link's event loop, so receiving (and decrypting) the next
// chunks overlaps with writing the last ones. Chunks are written in order on a serial queue; while more
// than `pauseAbove` octets wait, the link stops reading (TCP then holds the peer's sender back), and it reads
// again once the queue is down to `resumeBelow`: memory stays flat whatever the disk does.
//
// Threading contract: `write` is called on the link's event loop, in order; `finish` and `cancel` from any
// thread, each at most once and after the last `write`.
import Foundation
import PeerTransport

final class ResourceWriter: @unchecked Sendable {
    private let file: FileHandle
    private let link: PeerLink
    private let queue: DispatchQueue
    private let lock = NSLock()
    /// Octets handed over and not yet written.
    private var queued = 0
    /// This writer paused the link's reading.
    private var holding = false
    private var failure: (any Error)?
    private var stopped = false
    /// Told (once, on the writer's queue) about the first write that failed.
    private let onFailure: @Sendable (any Error) -> Void

    /// Octets per write(2). Pieces arrive up to a megabyte and more, but on Linux 6.x a larger write makes
    /// the page cache take larger folios, and here (a VM) those came from memory the host had to fault in
    /// again: a 1 GB resource took 2 s of CPU to write in 1 MiB calls against 0.8 s in 64 KB ones (the
    /// same file, same data; measured with `ble mc bench`).
    static let writeSize = 64 * 1024
    static let pauseAbove = 4 << 20
    static let resumeBelow = 1 << 20

    init(file: FileHandle, link: PeerLink, onFailure: @escaping @Sendable (any Error) -> Void) {
        self.file = file
        self.link = link
        self.onFailure = onFailure
        self.queue = DispatchQueue(label: "MCSession resource writer")
    }

    func write(_ chunk: PeerChunk) {
        let pause = lock.withLock { () -> Bool in
            queued += chunk.count
            guard queued > Self.pauseAbove, !holding else { return false }
            holding = true
            return true
        }
        if pause { link.pauseReading() }
        let bytes = Unchecked(chunk)
        queue.async { [self] in
            let go = lock.withLock { failure == nil && !stopped }
            var failed: (any Error)?
            if go {
                do {
                    try bytes.value.withUnsafeBytes { all in
                        var at = 0
                        while at < all.count {
                            let end = min(all.count, at + Self.writeSize)
                            try file.write(contentsOf: UnsafeRawBufferPointer(rebasing: all[at..<end]))
                            at = end
                        }
                    }
                } catch { failed = error }
            }
            let resume = lock.withLock { () -> Bool in
                queued -= bytes.value.count
                if let failed, failure == nil { failure = failed }
                guard holding, queued <= Self.resumeBelow else { return false }
                holding = false
                return true
            }
            if resume { link.resumeReading() }
            if let failed { onFailure(failed) }
        }
    }

    /// After every queued write: closes the file; `done` gets the first write error, nil when all were written.
    func finish(_ done: @escaping @Sendable ((any Error)?) -> Void) {
        queue.async { [self] in
            let (error, release) = stop()
            try? file.close()
            if release { link.resumeReading() }
            done(error)
        }
    }

    /// Drops the writes still queued and closes the file (the caller may unlink it at once: a write under
    /// way then goes to the unlinked file).
    func cancel() {
        let release = lock.withLock { () -> Bool in
            stopped = true
            defer { holding = false }
            return holding
        }
        if release { link.resumeReading() }
        queue.async { [self] in try? file.close() }
    }

    private func stop() -> ((any Error)?, Bool) {
        lock.withLock {
            stopped = true
            defer { holding = false }
            return (failure, holding)
        }
    }
}
