// A FIFO of octets: appended at the back in chunks, popped from the front into the reader's buffer. The
// storage is compacted once the consumed prefix is as large as what remains, so both ends are amortised O(1).
struct ByteQueue {
    private var storage: [UInt8] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { head == storage.count }

    mutating func append(_ bytes: [UInt8]) {
        if isEmpty && head > 0 { storage.removeAll(keepingCapacity: true); head = 0 }
        storage.append(contentsOf: bytes)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        if isEmpty && head > 0 { storage.removeAll(keepingCapacity: true); head = 0 }
        storage.append(contentsOf: bytes)
    }

    /// Moves up to `maxLength` octets into `dst`; returns how many.
    mutating func pop(into dst: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        let n = min(maxLength, count)
        guard n > 0 else { return 0 }
        storage.withUnsafeBufferPointer { src in
            dst.update(from: src.baseAddress! + head, count: n)
        }
        advance(n)
        return n
    }

    /// Removes and returns up to `maxLength` octets.
    mutating func pop(maxLength: Int) -> [UInt8] {
        let n = min(maxLength, count)
        guard n > 0 else { return [] }
        let out = Array(storage[head..<head + n])
        advance(n)
        return out
    }

    private mutating func advance(_ n: Int) {
        head += n
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 4096 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }

    mutating func removeAll() {
        storage.removeAll()
        head = 0
    }
}
