// GameKit.GKSession: the declarations are Swift (Sources/GameKit); see module.modulemap.
