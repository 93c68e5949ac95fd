// FuzzSupport: what every Fuzz<Name> executable shares.
//
// Each fuzz target defines `LLVMFuzzerTestOneInput` (libFuzzer's entry point) and either
// - under `-D FUZZING` (scripts/fuzz builds with `-sanitize=fuzzer,address -D FUZZING`): `<Module>_main`,
//   the symbol SwiftPM links as `main` for an executable module, which runs libFuzzer's driver
//   (`FuzzMain.libFuzzer`); libFuzzer's own `main` cannot be used because of that renaming; or
// - `swift build` builds ordinary executables: `FuzzATT Tests/FuzzCorpus/ATT` replays a corpus (and its
//   crashes/ folder) as a regression run, and `FuzzATT --make-seeds DIR` writes the seed corpus, made from
//   valid PDUs with the library's own encoders.
// Threading: single-threaded, like libFuzzer's loop.
import Foundation
#if FUZZING
import FuzzDriver
#endif

public enum FuzzMain {
    #if FUZZING
    /// Runs libFuzzer with the process's arguments and the target's entry point.
    public static func libFuzzer(
        _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
        _ test: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
    ) -> CInt {
        var argc = argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
        return LLVMFuzzerRunDriver(&argc, &argv, test)
    }
    #endif

    /// Runs the plain-build command line: replays files and folders given as arguments, or makes seeds.
    public static func run(name: String, test: ([UInt8]) -> Void, seeds: () throws -> [(String, [UInt8])]) {
        var args = Array(CommandLine.arguments.dropFirst())
        if args.first == "--make-seeds", args.count == 2 {
            let dir = URL(fileURLWithPath: args[1])
            do {
                try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
                let made = try seeds()
                for (file, bytes) in made {
                    test(bytes)   // every seed must pass through the target cleanly
                    try Data(bytes).write(to: dir.appendingPathComponent(file))
                }
                print("\(name): wrote \(made.count) seeds to \(dir.path)")
            } catch {
                print("\(name): \(error)")
                exit(1)
            }
            return
        }
        if args.isEmpty {
            print("usage: \(name) FILE|DIR…   (replay inputs)   |   \(name) --make-seeds DIR")
            print("Built with scripts/fuzz (-sanitize=fuzzer,address -D FUZZING) it is a libFuzzer target.")
            return
        }
        var count = 0
        while let path = args.first {
            args.removeFirst()
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else { continue }
            if isDir.boolValue {
                let entries = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                args.append(contentsOf: entries.sorted().map { path + "/" + $0 })
                continue
            }
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            test([UInt8](data))
            count += 1
        }
        print("\(name): replayed \(count) inputs without a crash")
    }
}

/// A check that must hold for every input; a failure is a finding, so it traps like any crash.
public func fuzzCheck(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz property failed: \(message())") }
}
