// The seed's GameKit photo exchange (KenshinCui, "iOS开发——高级技术&蓝牙服务详解", the GameKit ViewController),
// written in Swift from Apple's Swift declarations as an iOS app would write it, with UIKit taken out:
// - the UIImageView outlet is `image` (the photo's bytes), UIImagePNGRepresentation is those bytes, and
//   UIImageWriteToSavedPhotosAlbum writes them to `album`;
// - the two IBActions are plain methods (`selectClick` takes the file the image picker would have chosen);
// - `@objc` is gone from the data-receive method (Linux has no Objective-C runtime), and the class adopts
//   GameKit's GKSessionDataReceiveHandler in the one-line extension at the end: Swift on Linux cannot find the
//   method by its selector (README, "GameKit on Linux: what differs from iOS").
// Everything else is unchanged: the GameKit calls and the delegate method are Apple's Swift spellings.
import GameKit

class ViewController: NSObject, GKPeerPickerControllerDelegate {
    var image: Data?   // @IBOutlet weak var imageView: UIImageView! (照片显示视图)
    var session: GKSession!   // 蓝牙连接会话
    var album: URL?   // where UIImageWriteToSavedPhotosAlbum would put received photos

    // MARK: - 控制器视图方法
    func viewDidLoad() {
        // super.viewDidLoad()
        let pearPickerController = GKPeerPickerController()
        pearPickerController.delegate = self
        pearPickerController.show()
        picker = pearPickerController   // UIKit keeps the presented picker alive; here the controller does
    }
    private var picker: GKPeerPickerController?

    // MARK: - UI事件
    func selectClick(_ chosenFile: URL) {
        // UIImagePickerController → imagePickerController(_:didFinishPickingMediaWithInfo:)
        image = try? Data(contentsOf: chosenFile)
    }

    func sendClick() {
        let data = image   // UIImagePNGRepresentation(self.imageView.image)
        do {
            try session.sendData(toAllPeers: data, with: .reliable)
        } catch {
            print("发送图片过程中发生错误,错误信息:\(error.localizedDescription)")
        }
    }

    // MARK: - GKPeerPickerController代理方法
    /// 连接到某个设备
    func peerPickerController(_ picker: GKPeerPickerController, didConnectPeer peerID: String, to session: GKSession) {
        self.session = session
        print("已连接客户端设备:\(peerID).")
        // 设置数据接收处理句柄,相当于代理,一旦数据接收完成调用它的-receiveData:fromPeer:inSession:context:方法处理数据
        self.session.setDataReceiveHandler(self, withContext: nil)
        picker.dismiss()   // 一旦连接成功关闭窗口
    }

    // MARK: - 蓝牙数据接收方法
    func receiveData(_ data: Data, fromPeer peer: String, inSession session: GKSession, context: UnsafeMutableRawPointer?) {
        image = data   // let image = UIImage(data: data); self.imageView.image = image
        if let album { try? data.write(to: album) }   // UIImageWriteToSavedPhotosAlbum(image, nil, nil, nil)
        print("数据发送成功!")
    }
}

// The one addition Linux needs (no selectors): the handler adopts the protocol whose method it already has.
extension ViewController: GKSessionDataReceiveHandler {}
