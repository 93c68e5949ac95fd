// Coexistence and interop with avahi-daemon: one namespace with only loopback (multicast on), where
// avahi-daemon and our responder share port 5353. avahi runs in a private mount namespace with a tmpfs
// over /run (its own D-Bus system bus, pid and socket files), so nothing of the host is touched; the
// script kills both daemons and the mount namespace vanishes with it.
import Foundation
import Testing

@Suite(
    .serialized,
    .enabled(
        if: Netns.available && FileManager.default.isExecutableFile(atPath: "/usr/sbin/avahi-daemon")
            && FileManager.default.isExecutableFile(atPath: "/usr/bin/avahi-browse"),
        "needs root, network namespaces and Debian's avahi-daemon + avahi-utils; avahi interop skipped"))
struct AvahiInteropTests {
    static let script = """
        set -u
        dir="$1"
        mount -t tmpfs tmpfs /run && mkdir -p /run/dbus /run/avahi-daemon || exit 3
        printf '[server]\\nuse-ipv4=yes\\nuse-ipv6=yes\\n[publish]\\npublish-hinfo=no\\npublish-workstation=no\\n' > "$dir/avahi.conf"
        dbus-daemon --system --fork --print-pid > "$dir/dbus.pid"
        avahi-daemon -f "$dir/avahi.conf" --no-drop-root --no-chroot --no-rlimits > "$dir/avahi.log" 2>&1 & AV=$!
        trap 'kill $AV 2>/dev/null; kill $(cat "$dir/dbus.pid") 2>/dev/null; kill $PUB 2>/dev/null; wait' EXIT TERM
        sleep 2
        echo "avahi up"
        avahi-publish -s Avi _chat._tcp 5000 _d=Avi _lx=1 > "$dir/pub.log" 2>&1 & PUB=$!
        sleep 4
        avahi-browse -rpt _chat._tcp | sed 's/^/browse /'
        avahi-publish -s Taken _chat._tcp 5001 > "$dir/pub2.log" 2>&1 & P2=$!
        sleep 3
        kill $P2
        sed 's/^/pub2 /' "$dir/pub2.log"
        sleep 1
        echo "avahi done"
        """

    @Test func avahiAndUsShareThePortAndSeeEachOther() throws {
        let ns = "dnsAv\(getpid() % 100000)"
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("dnssd-avahi-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var children: [Child] = []
        defer {
            for c in children { c.stop() }
            Netns.run(["ip", "netns", "del", ns])
            try? FileManager.default.removeItem(at: dir)
        }
        try #require(Netns.run(["ip", "netns", "add", ns]) == 0)
        Netns.run(["ip", "-n", ns, "link", "set", "lo", "up"])
        Netns.run(["ip", "-n", ns, "link", "set", "lo", "multicast", "on"])
        let ours = try Child(["ip", "netns", "exec", ns, Netns.tool, "register", "--name", "Ours", "--port", "4242", "--txt", "_d=Bob"])
        children.append(ours)
        #expect(ours.waitFor("registered Ours", timeout: 3) != nil, "\(ours.output)")
        let taken = try Child(["ip", "netns", "exec", ns, Netns.tool, "register", "--name", "Taken", "--port", "9"])
        children.append(taken)
        let browser = try Child(["ip", "netns", "exec", ns, Netns.tool, "browse"])
        children.append(browser)
        let avahi = try Child([
            "timeout", "40", "ip", "netns", "exec", ns, "unshare", "-m", "--propagation", "private",
            "sh", "-c", Self.script, "sh", dir.path,
        ])
        children.append(avahi)
        #expect(avahi.waitFor("avahi done", timeout: 30) != nil, "avahi:\n\(avahi.output)")
        // avahi-browse resolves our advertisement.
        #expect(avahi.output.contains(";Ours;_chat._tcp;local;"), "avahi:\n\(avahi.output)")
        #expect(avahi.output.contains(";4242;\"_d=Bob\""), "avahi:\n\(avahi.output)")
        // We resolve avahi's.
        #expect(browser.waitFor("found Avi\t", timeout: 2) != nil, "ours:\n\(browser.output)")
        #expect(browser.output.contains("port=5000"))
        // avahi-publish loses the name we hold (its probe meets our defence).
        #expect(avahi.output.contains("pub2") && avahi.output.lowercased().contains("collision"), "avahi:\n\(avahi.output)")
        #expect(!taken.output.contains("renamed"))
    }
}
