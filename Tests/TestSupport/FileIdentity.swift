// What a descriptor number names: tests of descriptor ownership compare it before and after, since a number closed
// and given to another file in between keeps its value but names something else.
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a descriptor number names now (device and inode), nil when nothing: a number closed and given to another
/// file in between reads as changed.
public struct FileIdentity: Equatable, Sendable {
    public let device: UInt
    public let inode: UInt

    public init?(_ fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        device = UInt(st.st_dev)
        inode = UInt(st.st_ino)
    }
}
