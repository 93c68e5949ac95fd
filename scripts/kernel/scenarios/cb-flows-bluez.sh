# timeout: 900
# The package's Core Bluetooth flow tests on BLE_TRANSPORT=bluez (issue 28): HeartRateFlowTests' and
# L2CAPChannelTests' delegates, unchanged, in BlueZKernelFlowTests, with one manager on the bluez backend (bluetoothd
# keeps hci0) and the other on our own stack over the HCI user channel of hci1, each way round: the seeds' heart-rate
# flow (scan with a service filter, connect, discover, subscribe, 5 notifications in order, a cached read, a write
# with response, cancel) and an L2CAP channel (1 MB up and 300 KB down through streams on a run loop); then the seed's
# firmware update (examples/firmware-update, FirmwareUpdateKernelTests), unchanged: the updater on bluez sending a
# 200 KB image over an L2CAP channel (the device on bluez, taking a 40 KB image in Write Commands, is fw-device-bluez:
# it needs bluetoothd with a 512-octet MTU, which that scenario explains). Each test runs
# in a test process of its own, so that hci1 is free again for the next. The controllers have 1021-octet LE buffers
# (fast_controllers): with rootcanal's 27-octet ones the megabyte would not fit in the time limit.
start_bluez || fail "BlueZ did not start"
fast_controllers || fail "no fast controllers"
# bluetoothd powered the new hci1 again a few seconds after fast_controllers had released it (and after each test
# process let it go), and kept it: our host then retried "in use by the kernel's Bluetooth stack" for the whole
# test. A keeper (keep_down) holds hci1 down while a test starts, until the test's host has bound it.
failed=""
for t in BlueZKernelFlowTests/heartRateFlowWithTheCentralOnBlueZ BlueZKernelFlowTests/heartRateFlowWithThePeripheralOnBlueZ \
    BlueZKernelFlowTests/l2capChannelPublishedOnBlueZ BlueZKernelFlowTests/l2capChannelOpenedOnBlueZ \
    FirmwareUpdateKernelTests/theUpdaterOnBlueZSendsTheImageOverAnL2CAPChannel; do
    # bluetoothd forgets hci1's device: it keeps the GATT database of every device it connected to (main.conf's
    # [GATT] Cache, "always" by default) and hci1's address serves another database in each test (the firmware
    # updater on bluez found no update service in the heart-rate database kept from before).
    reset_bluez || log "reset_bluez failed before $t"
    keep_down 1
    keeper=$KEEPER
    start=$SECONDS
    if guest_test "$t"; then
        log "$t passed in $((SECONDS - start)) s"
    else
        log "$t FAILED after $((SECONDS - start)) s; hci1 now: $(hciconfig hci1 | tr '\n' ' ')"
        failed="$failed $t"
    fi
    kill $keeper 2>/dev/null; wait $keeper 2>/dev/null
    cp "$OCB_OUT/$OCB_SCENARIO.test.log" "$OCB_OUT/$OCB_SCENARIO.${t#*/}.log" 2>/dev/null
    hciconfig hci0 | grep -q "UP RUNNING" || bluez_up 0 20 || fail "hci0 is no longer up after $t"
done
[ -z "$failed" ] || fail "failed:$failed"
log "ok"
