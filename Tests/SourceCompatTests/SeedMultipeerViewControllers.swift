// The seed's two Multipeer Connectivity view controllers (KenshinCui's photo exchange: the advertiser and
// the browser), written in Swift from Apple's Swift declarations as an iOS app would write them, with UIKit
// taken out: UIImageView and UIImagePickerController become the photo's bytes, `present(_:animated:)` of the
// browser becomes `present()` and the dismissals go (README, "Multipeer Connectivity on Linux: what differs
// from iOS"). Every Multipeer call and delegate method is unchanged.
import MultipeerConnectivity

/// MultipeerConnectivity_Advertiser's ViewController.
class AdvertiserViewController: NSObject, MCSessionDelegate, MCAdvertiserAssistantDelegate {
    var session: MCSession!
    var advertiserAssistant: MCAdvertiserAssistant!
    var photo: Data?   // @IBOutlet weak var photo: UIImageView!

    func viewDidLoad() {
        // 创建节点,displayName是用于提供给周边设备查看和区分此服务的
        let peerID = MCPeerID(displayName: "KenshinCui_Advertiser")
        session = MCSession(peer: peerID)
        session.delegate = self
        // 创建广播
        advertiserAssistant = MCAdvertiserAssistant(serviceType: "cmj-stream", discoveryInfo: nil, session: session)
        advertiserAssistant.delegate = self
    }

    // MARK: - UI事件
    func advertiserClick() {
        advertiserAssistant.start()   // 开始广播
    }

    // MARK: - MCSession代理方法
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        print("didChangeState")
        switch state {
        case .connected: print("连接成功.")
        case .connecting: print("正在连接...")
        default: print("连接失败.")
        }
    }

    // 接收数据
    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        print("开始接收数据...")
        photo = data   // UIImage(data:) → self.photo.image; UIImageWriteToSavedPhotosAlbum
    }

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: Error?) {}

    // MARK: - UIImagePickerController代理方法 (the chosen photo's bytes)
    func imagePickerController(didFinishPicking image: Data) {
        photo = image
        // 发送数据给所有已连接设备
        do {
            try session.send(image, toPeers: session.connectedPeers, with: .unreliable)
            print("开始发送数据...")
        } catch {
            print("发送数据过程中发生错误,错误信息:\(error.localizedDescription)")
        }
    }
}

/// MultipeerConnectivity (the browser)'s ViewController.
class BrowserViewController: NSObject, MCSessionDelegate, MCBrowserViewControllerDelegate {
    var session: MCSession!
    var browserController: MCBrowserViewController!
    var photo: Data?

    func viewDidLoad() {
        let peerID = MCPeerID(displayName: "KenshinCui")   // 创建节点
        session = MCSession(peer: peerID)   // 创建会话
        session.delegate = self
    }

    // MARK: - UI事件
    func browserClick() {
        browserController = MCBrowserViewController(serviceType: "cmj-stream", session: session)
        browserController.delegate = self
        browserController.present()   // self.present(browserController, animated: true, completion: nil)
    }

    // MARK: - MCBrowserViewController代理方法
    func browserViewControllerDidFinish(_ browserViewController: MCBrowserViewController) {
        print("已选择")   // browserController.dismiss(animated: true, completion: nil)
    }

    func browserViewControllerWasCancelled(_ browserViewController: MCBrowserViewController) {
        print("取消浏览.")   // browserController.dismiss(animated: true, completion: nil)
    }

    // MARK: - MCSession代理方法
    func session(_ session: MCSession, peer peerID: MCPeerID, didChange state: MCSessionState) {
        print("didChangeState")
        switch state {
        case .connected:
            print("连接成功.")   // browserController.dismiss(animated: true, completion: nil)
        case .connecting:
            print("正在连接...")
        default:
            print("连接失败.")
        }
    }

    func session(_ session: MCSession, didReceive data: Data, fromPeer peerID: MCPeerID) {
        print("开始接收数据...")
        photo = data
    }

    func session(_ session: MCSession, didReceive stream: InputStream, withName streamName: String, fromPeer peerID: MCPeerID) {}
    func session(_ session: MCSession, didStartReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, with progress: Progress) {}
    func session(_ session: MCSession, didFinishReceivingResourceWithName resourceName: String, fromPeer peerID: MCPeerID, at localURL: URL?, withError error: Error?) {}

    func imagePickerController(didFinishPicking image: Data) {
        photo = image
        do {
            try session.send(image, toPeers: session.connectedPeers, with: .unreliable)
            print("开始发送数据...")
        } catch {
            print("发送数据过程中发生错误,错误信息:\(error.localizedDescription)")
        }
    }
}
