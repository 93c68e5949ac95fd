// HCI command flow control (Vol 4 Part E §4.4): a command is sent only while the controller has granted a
// credit; Command Complete and Command Status return credits (Num_HCI_Command_Packets) and answer the
// outstanding command. Every command has a timeout; a command that times out fails its caller and the host
// goes on with the next one.
import BLEHCI
import BLETransport

extension LEHost {
    /// Queues an HCI command; `completion` runs on the loop with Command Complete's return parameters or
    /// Command Status's status.
    func command(_ command: HCICommand, timeout: LoopTime? = nil, completion: @escaping (Result<CommandOutcome, HostError>) -> Void = { _ in }) {
        commandQueue.append(PendingCommand(command: command, timeout: timeout, completion: completion))
        pumpCommands()
    }

    /// Queues a command whose Command Complete starts with a status; fails the completion on a non-zero status.
    func commandExpectingSuccess(_ command: HCICommand, completion: @escaping (HostError?) -> Void = { _ in }) {
        let op = command.opcode
        self.command(command) { r in
            switch r {
            case let .success(.complete(p)):
                let st = HCIStatus(rawValue: p.first ?? 0xFF)
                completion(st == .success ? nil : .commandFailed(opcode: op, status: st))
            case let .success(.status(st)):
                completion(st == .success ? nil : .commandFailed(opcode: op, status: st))
            case let .failure(e):
                completion(e)
            }
        }
    }

    func pumpCommands() {
        while commandCredits > 0, outstandingCommand == nil, commandQueueHead < commandQueue.count {
            let next = commandQueue[commandQueueHead]
            // The slot lets go of the completion now, not when the queue is next compacted (after 64 more
            // commands): a completion holds its caller (a peripheral manager holds the host), and a host kept
            // alive by its own queue would never be freed.
            commandQueue[commandQueueHead].completion = { _ in }
            commandQueueHead += 1
            if commandQueueHead > 64, commandQueueHead * 2 > commandQueue.count {
                commandQueue.removeFirst(commandQueueHead)
                commandQueueHead = 0
            }
            commandCredits -= 1
            let op = next.command.opcode
            let timer = loop.schedule(after: next.timeout ?? commandTimeout) { [weak self] in self?.commandTimedOut(op) }
            outstandingCommand = (op, next, timer)
            if loggers.hciTraces { loggers.hci.trace("command out", metadata: ["command": "\(op)"]) }
            transport.send(next.command.encode())
        }
    }

    private func commandTimedOut(_ op: HCIOpcode) {
        guard let out = outstandingCommand, out.opcode == op else { return }
        loggers.hci.warning("command timed out", metadata: ["command": "\(op)"])
        outstandingCommand = nil
        commandCredits = 1
        out.pending.completion(.failure(.commandTimedOut(op)))
        pumpCommands()
    }

    func commandAnswered(opcode: HCIOpcode, credits: UInt8, outcome: CommandOutcome) {
        commandCredits = Int(credits)
        if let out = outstandingCommand, out.opcode == opcode {
            outstandingCommand = nil
            loop.cancel(out.timer)
            out.pending.completion(.success(outcome))
        } else if opcode.rawValue != 0 {
            loggers.hci.debug("answer that nobody is waiting for", metadata: ["command": "\(opcode)"])
        }
        pumpCommands()
    }
}
