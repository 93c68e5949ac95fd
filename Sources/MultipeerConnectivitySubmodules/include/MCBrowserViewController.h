// MultipeerConnectivity.MCBrowserViewController: the declarations are Swift (Sources/MultipeerConnectivity); see module.modulemap.
