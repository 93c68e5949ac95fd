// Throughput of a BoundStreams pair, release build: a writer run loop and a reader run loop, each acting
// only on delegate events, as an app does. Built and run by scripts/bench-streams.
import BoundStreams
import Foundation

final class Box<T>: @unchecked Sendable { var value: T; init(_ v: T) { value = v } }

final class Writer: NSObject, StreamDelegate, @unchecked Sendable {
    let total: Int, chunk: [UInt8]
    var sent = 0
    init(total: Int, chunk: Int) { self.total = total; self.chunk = [UInt8](repeating: 0x5A, count: chunk) }
    func stream(_ s: Stream, handle e: Stream.Event) {
        guard e == .hasSpaceAvailable, let out = s as? OutputStream else { return }
        while sent < total {
            let n = out.write(chunk, maxLength: min(chunk.count, total - sent))
            if n <= 0 { return }
            sent += n
        }
        out.close()
    }
}

final class Reader: NSObject, StreamDelegate, @unchecked Sendable {
    var received = 0
    let done = DispatchSemaphore(value: 0)
    var buffer = [UInt8](repeating: 0, count: 65_536)
    func stream(_ s: Stream, handle e: Stream.Event) {
        guard let input = s as? InputStream else { return }
        if e == .hasBytesAvailable {
            while input.hasBytesAvailable {
                let n = input.read(&buffer, maxLength: buffer.count)
                if n <= 0 { break }
                received += n
            }
        } else if e == .endEncountered {
            input.close(); done.signal()
        }
    }
}

func loopThread(_ body: @escaping @Sendable (RunLoop) -> Void) {
    Thread {
        body(RunLoop.current)
        while RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(0.2)) {}
    }.start()
}

let bufferSize = Int(CommandLine.arguments.dropFirst().first ?? "") ?? 65_536
let chunk = Int(CommandLine.arguments.dropFirst(2).first ?? "") ?? 16_384
let total = 256 * 1_048_576
let (input, output) = BoundStreams.makePair(bufferSize: bufferSize)
let writer = Writer(total: total, chunk: chunk), reader = Reader()
input.delegate = reader; output.delegate = writer
let pair = Box((input, output))
let start = Date()
loopThread { rl in pair.value.0.schedule(in: rl, forMode: .default); pair.value.0.open() }
loopThread { rl in pair.value.1.schedule(in: rl, forMode: .default); pair.value.1.open() }
reader.done.wait()
let seconds = Date().timeIntervalSince(start)
print(String(format: "bound pair %d B buffer, %d B writes: %d MB in %.2f s = %.0f MB/s", bufferSize, chunk, total >> 20, seconds, Double(total) / seconds / 1e6))
