// The airtime model in the virtual radio (switched on with `VirtualAir.airtime`): ACL data no longer
// crosses at once but in connection events. The central's controller opens an event at every anchor
// point; each exchange carries the next LL fragment (or an empty packet) from the central and the
// peripheral's answer, lasts AirtimeModel.exchangeDuration, and the event continues while either side has
// more data (MD) and the next exchange still fits. A host's ACL packet reaches the peer when its last
// fragment has crossed, and its buffer credit returns when that fragment is acknowledged; a lost packet
// is sent again in the next exchange. Outcomes apply at the end of each exchange.
import BLEWire
import BLEHCI
import BLETransport

/// One host ACL packet waiting to cross: what the peer receives, and the LL fragments still to send.
struct AirPacket {
    var forPeer: HCIPacket
    var handle: UInt16
    var fragments: [Int]
    var sent = 0
}

extension VirtualController {
    /// The airtime model of link `handle` as negotiated (PHY, data length, interval); nil without such a
    /// link or without airtime. Call on the air's loop.
    public func linkModel(handle: UInt16) -> AirtimeModel? {
        links[handle].flatMap { airtime(for: $0) }
    }

    /// The model in force on a link: the air's settings with the link's PHY, data length and interval.
    func airtime(for link: VirtualLink) -> AirtimeModel? {
        guard var m = airRef?.airtime else { return nil }
        m.phy = link.phy
        m.dataLength = link.dataLength
        m.connectionIntervalMicroseconds = Double(link.interval) * 1250
        m.encrypted = link.encrypted
        return m
    }

    /// Queues a host ACL packet for the air.
    func enqueueForAir(_ acl: ACLPacket, on link: VirtualLink, model: AirtimeModel) {
        var sizes: [Int] = []
        var left = acl.data.count
        repeat { sizes.append(min(max(left, 0), model.dataLength)); left -= model.dataLength } while left > 0
        link.airQueue.append(
            AirPacket(
                forPeer: ACLPacket(
                    handle: link.peerHandle, boundary: acl.boundary, broadcast: acl.broadcast,
                    data: acl.data
                ).encode(),
                handle: acl.handle, fragments: sizes))
    }

    /// The central's controller runs the link's connection events from now on.
    func startConnectionEvents(_ link: VirtualLink) {
        guard link.role == 0, airRef?.airtime != nil else { return }
        scheduleConnectionEvent(link, after: 0)
    }

    private func scheduleConnectionEvent(_ link: VirtualLink, after delay: LoopTime) {
        link.eventTimer = loop.schedule(after: delay) { [weak self] in
            guard let self, self.links[link.handle] === link else { return }
            self.connectionEvent(link)
        }
    }

    private func connectionEvent(_ central: VirtualLink) {
        guard let model = airtime(for: central), let peer = central.peer, let peripheral = peer.links[central.peerHandle] else { return }
        let anchor = loop.now
        let interval = LoopTime(model.connectionIntervalMicroseconds * 1000)
        exchange(central, peripheral, peer: peer, model: model, elapsed: 0, first: true)
        scheduleConnectionEvent(central, after: interval - min(interval, loop.now - anchor))
    }

    /// One exchange of the event at `elapsed` µs after the anchor; the next one is scheduled at its end.
    private func exchange(
        _ central: VirtualLink, _ peripheral: VirtualLink, peer: VirtualController, model: AirtimeModel,
        elapsed: Double, first: Bool
    ) {
        let m = central.nextFragment, s = peripheral.nextFragment
        // More Data: after the first exchange the event goes on only while someone has something to send.
        if !first && m == nil && s == nil { return }
        let d = model.exchangeDuration(payload: m ?? 0, reply: s ?? 0)
        guard elapsed + d <= model.eventBudget else { return }
        let lostM = m != nil && lose(model.lossRate), lostS = s != nil && lose(model.lossRate)
        loop.schedule(after: LoopTime(d * 1000)) { [weak self] in
            guard let self, self.links[central.handle] === central, peer.links[peripheral.handle] === peripheral else { return }
            if m != nil && !lostM { self.fragmentCrossed(central, from: self, to: peer) }
            if s != nil && !lostS { self.fragmentCrossed(peripheral, from: peer, to: self) }
            self.exchange(central, peripheral, peer: peer, model: model, elapsed: elapsed + d, first: false)
        }
    }

    private func lose(_ p: Double) -> Bool {
        guard p > 0, let air = airRef else { return false }
        return Double(air.rng.next(below: 1_000_000)) / 1_000_000 < p
    }

    /// A fragment arrived: when it was a packet's last, the peer's host gets the packet and ours the credit.
    private func fragmentCrossed(_ link: VirtualLink, from sender: VirtualController, to receiver: VirtualController) {
        guard !link.airQueue.isEmpty else { return }
        link.airQueue.front.sent += 1
        let p = link.airQueue.front
        guard p.sent == p.fragments.count else { return }
        // The receiver's buffers for its host are full (controller-to-host flow control): it does not
        // acknowledge, and the fragment goes again.
        if !link.lost && !receiver.acceptsFromAir {
            link.airQueue.front.sent -= 1
            return
        }
        _ = link.airQueue.popFirst()
        if !link.lost { receiver.deliverFromAir(p.forPeer) }
        sender.creditReturned(handle: p.handle)
    }
}

extension VirtualLink {
    var nextFragment: Int? {
        guard let p = airQueue.first else { return nil }
        return p.fragments[p.sent]
    }
}
