// MultipeerConnectivity.MCError: the declarations are Swift (Sources/MultipeerConnectivity); see module.modulemap.
