"""sparktap.dashboards"""
