import PorterCLI

PorterCommand.main()
