// Names from the Bluetooth SIG Assigned Numbers document for what `ble scan` and `ble gatt` show: the
// commonly met services, characteristics, descriptors, company identifiers, appearance categories and
// Characteristic Presentation Format units. Compact on purpose (the whole registry has thousands of
// entries); anything not listed is shown by its number.
import BLEWire

enum AssignedNumbers {
    static let services: [UInt16: String] = [
        0x1800: "Generic Access", 0x1801: "Generic Attribute", 0x1802: "Immediate Alert", 0x1803: "Link Loss",
        0x1804: "Tx Power", 0x1805: "Current Time", 0x1808: "Glucose", 0x1809: "Health Thermometer",
        0x180A: "Device Information", 0x180D: "Heart Rate", 0x180F: "Battery", 0x1810: "Blood Pressure",
        0x1811: "Alert Notification", 0x1812: "Human Interface Device", 0x1813: "Scan Parameters",
        0x1814: "Running Speed and Cadence", 0x1816: "Cycling Speed and Cadence", 0x1818: "Cycling Power",
        0x1819: "Location and Navigation", 0x181A: "Environmental Sensing", 0x181C: "User Data",
        0x181D: "Weight Scale", 0x1822: "Pulse Oximeter", 0x1826: "Fitness Machine", 0x1827: "Mesh Provisioning",
        0x1828: "Mesh Proxy", 0xFE59: "Nordic DFU",
    ]

    static let characteristics: [UInt16: String] = [
        0x2A00: "Device Name", 0x2A01: "Appearance", 0x2A02: "Peripheral Privacy Flag", 0x2A03: "Reconnection Address",
        0x2A04: "Peripheral Preferred Connection Parameters", 0x2A05: "Service Changed", 0x2A06: "Alert Level",
        0x2A07: "Tx Power Level", 0x2A19: "Battery Level", 0x2A1C: "Temperature Measurement",
        0x2A23: "System ID", 0x2A24: "Model Number String", 0x2A25: "Serial Number String",
        0x2A26: "Firmware Revision String", 0x2A27: "Hardware Revision String", 0x2A28: "Software Revision String",
        0x2A29: "Manufacturer Name String", 0x2A2B: "Current Time", 0x2A35: "Blood Pressure Measurement",
        0x2A37: "Heart Rate Measurement", 0x2A38: "Body Sensor Location", 0x2A39: "Heart Rate Control Point",
        0x2A4A: "HID Information", 0x2A4B: "Report Map", 0x2A4C: "HID Control Point", 0x2A4D: "Report",
        0x2A4E: "Protocol Mode", 0x2A50: "PnP ID", 0x2A6D: "Pressure", 0x2A6E: "Temperature", 0x2A6F: "Humidity",
        0x2AA6: "Central Address Resolution", 0x2AC9: "Resolvable Private Address Only",
        0x2B29: "Client Supported Features", 0x2B2A: "Database Hash", 0x2B3A: "Server Supported Features",
    ]

    static let descriptors: [UInt16: String] = [
        0x2900: "Characteristic Extended Properties", 0x2901: "Characteristic User Description",
        0x2902: "Client Characteristic Configuration", 0x2903: "Server Characteristic Configuration",
        0x2904: "Characteristic Presentation Format", 0x2905: "Characteristic Aggregate Format",
        0x2906: "Valid Range", 0x2908: "Report Reference",
    ]

    /// GATT attribute types (Vol 3 Part G §3.4, Table 3.4).
    static let declarations: [UInt16: String] = [
        0x2800: "Primary Service", 0x2801: "Secondary Service", 0x2802: "Include", 0x2803: "Characteristic",
    ]

    static let companies: [UInt16: String] = [
        0x0000: "Ericsson", 0x0001: "Nokia", 0x0002: "Intel", 0x0006: "Microsoft", 0x000A: "Qualcomm Technologies International",
        0x000D: "Texas Instruments", 0x000F: "Broadcom", 0x001D: "Qualcomm", 0x004C: "Apple",
        0x0059: "Nordic Semiconductor", 0x0075: "Samsung Electronics", 0x0087: "Garmin", 0x009E: "Bose",
        0x00E0: "Google", 0x012D: "Sony", 0x0131: "Cypress Semiconductor", 0x0157: "Anhui Huami",
        0x0171: "Amazon", 0x01DA: "Logitech", 0x027D: "Huawei", 0x02E5: "Espressif", 0x038F: "Xiaomi",
        0x0499: "Ruuvi Innovations", 0x05F1: "The Linux Foundation", 0x0822: "Adafruit Industries",
        0xFFFF: "reserved for testing",
    ]

    /// Appearance categories (bits 15–6 of the Appearance value).
    static let appearanceCategories: [UInt16: String] = [
        0x000: "Unknown", 0x001: "Phone", 0x002: "Computer", 0x003: "Watch", 0x004: "Clock", 0x005: "Display",
        0x006: "Remote Control", 0x007: "Eye-glasses", 0x008: "Tag", 0x009: "Keyring", 0x00A: "Media Player",
        0x00B: "Barcode Scanner", 0x00C: "Thermometer", 0x00D: "Heart Rate Sensor", 0x00E: "Blood Pressure",
        0x00F: "Human Interface Device", 0x010: "Glucose Meter", 0x011: "Running Walking Sensor", 0x012: "Cycling",
        0x031: "Pulse Oximeter", 0x032: "Weight Scale",
    ]

    /// Full appearance values with a subcategory of their own.
    static let appearances: [UInt16: String] = [
        0x00C1: "Sports Watch", 0x0341: "Heart Rate Belt", 0x03C1: "Keyboard", 0x03C2: "Mouse", 0x03C3: "Joystick",
        0x03C4: "Gamepad",
    ]

    /// Characteristic Presentation Format units (GATT Unit), as symbols where there is one.
    static let units: [UInt16: String] = [
        0x2700: "", 0x2701: "m", 0x2702: "kg", 0x2703: "s", 0x2704: "A", 0x2705: "K", 0x2722: "Hz",
        0x2724: "Pa", 0x2725: "J", 0x2726: "W", 0x2728: "V", 0x272F: "°C", 0x27AC: "°F", 0x27AD: "%",
    ]

    static func name(ofService u: BluetoothUUID) -> String? { u.uuid16.flatMap { services[$0] } }
    static func name(ofCharacteristic u: BluetoothUUID) -> String? { u.uuid16.flatMap { characteristics[$0] } }
    static func name(ofDescriptor u: BluetoothUUID) -> String? { u.uuid16.flatMap { descriptors[$0] } }
    /// Any of the three, for a UUID met without context (scan filters, advertised services).
    static func name(of u: BluetoothUUID) -> String? {
        name(ofService: u) ?? name(ofCharacteristic: u) ?? name(ofDescriptor: u) ?? u.uuid16.flatMap { declarations[$0] }
    }

    static func company(_ id: UInt16) -> String? { companies[id] }

    static func appearance(_ v: UInt16) -> String {
        if let n = appearances[v] { return n }
        let category = appearanceCategories[v >> 6] ?? "category 0x" + String(v >> 6, radix: 16)
        return v & 0x3F == 0 ? category : "\(category) (subcategory \(v & 0x3F))"
    }
}
