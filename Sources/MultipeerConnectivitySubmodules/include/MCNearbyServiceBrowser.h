// MultipeerConnectivity.MCNearbyServiceBrowser: the declarations are Swift (Sources/MultipeerConnectivity); see module.modulemap.
