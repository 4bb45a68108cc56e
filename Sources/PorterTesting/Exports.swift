@_exported import PorterTestKit
