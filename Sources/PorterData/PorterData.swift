import PorterCore
