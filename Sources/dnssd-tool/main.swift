// dnssd-tool: register or browse DNS-SD services from the command line (being written).
import DNSSDNIO
print("dnssd-tool: not implemented yet")
